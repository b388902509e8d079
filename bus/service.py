"""The one base class of every llmbus service process.

A service binds a ROUTER for requests and a PUB for events, heartbeats every interval,
advertises itself over mDNS, and answers the `bus.*` messages every service speaks.
Handlers are found in a table by message type:

    class Shard(Service):
        kind = "shard"

        @handles(ForwardBatch)
        async def forward(self, msg: wire.Message) -> ForwardResult: ...

        @streams(Generate)                  # an async generator: each yield is one reply
        async def generate(self, msg: wire.Message): yield Token(...); ...

A streamed reply is the yielded bodies with the request's id, then `bus.stream_end` (or a
`bus.error`). The caller stops it with `bus.cancel {id}`; a caller that vanished (its
connection closed) stops it too: the handler sees CancelledError inside its `yield`.

Lifecycle: starting -> ready -> draining -> stopped. SIGTERM and SIGINT drain: new requests
are refused with `draining`, requests in flight finish (up to drain_timeout), then it stops.
Past `config.max_requests` at once (streams count), new requests are refused with `busy`.

This file holds the lifecycle; the request loop is in requests.py, heartbeats in heartbeat.py,
the `bus.*` handlers in bus_methods.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter

import zmq
import zmq.asyncio

from wire.messages.bus import Event, Identity
from wire.messages.info import ServiceInfo

from . import zap
from .bus_methods import BusMethods
from .config import ServiceConfig
from .directory import Directory
from .dispatch import Handler, handler_table, handles, streams
from .handshakes import RefusedHandshakes
from .heartbeat import Heartbeats
from .machine import machine_id
from .mdns import Advertiser, Candidate, open_zeroconf
from .notify import Notifier
from .peers import Peers
from .requests import RequestLoop
from .sockets import CONTROL, BindError, SocketLimits, bind, limits_for_kind, make_socket

__all__ = ["Handler", "Service", "handles", "streams"]


class Service(RequestLoop, Heartbeats, BusMethods):
    """One service process: subclasses set `kind`, add handlers, and may load in on_start."""

    kind = "service"
    # What the request socket takes (and callers' sockets match); None: by kind, see sockets.py.
    request_limits: SocketLimits | None = None

    def __init__(self, config: ServiceConfig, ctx: zmq.asyncio.Context | None = None):
        self.config = config
        self.name = config.name
        self.instance = config.instance
        self.epoch = time.time_ns()          # new on every start; grows across restarts
        self.state = "starting"
        self.progress = 0                    # bump when work gets done (watchdog, health)
        self.counters: Counter[str] = Counter()
        self.ctx = ctx or zmq.asyncio.Context.instance()
        self.notifier = Notifier()
        self.directory: Directory | None = None
        self.peers: Peers | None = None
        self.rpc_port = 0
        self.pub_port = 0
        self.started_at = time.monotonic()
        self._handlers: dict[str, Handler] = handler_table(type(self))
        self._request_limits = self.request_limits or limits_for_kind(self.kind)
        self._inflight: set[asyncio.Task] = set()
        self._capped: set[asyncio.Task] = set()      # the requests under the cap (not bus.*)
        self._streams: dict[tuple[bytes, int], asyncio.Task] = {}  # (caller, id) -> its handler task
        self._tasks: list[asyncio.Task] = []
        self._stop = asyncio.Event()
        self._router = self._pub = None
        self._zc = None
        self._advertiser: Advertiser | None = None
        self._hb_seq = 0
        self._admitted = False
        self._refused: list[RefusedHandshakes] = []

    # ------------------------------------------------------------------ what subclasses add
    def info(self) -> ServiceInfo:
        """What this service tells about itself in heartbeats and status: its kind's record in
        wire.messages.info (a shard's layer range, say)."""
        return ServiceInfo()

    def identity(self) -> Identity:
        return Identity(name=self.name, kind=self.kind, instance=self.instance, epoch=self.epoch,
                        host=self.config.bus.advertised, rpc_port=self.rpc_port,
                        pub_port=self.pub_port, machine=machine_id(), pid=os.getpid(),
                        unit=self.config.unit)

    @property
    def load(self) -> float:
        return float(len(self._inflight))

    async def on_start(self) -> None:
        """Load what the service needs before it reports ready."""

    async def on_stop(self) -> None:
        """Release resources after draining."""

    # ------------------------------------------------------------------ lifecycle
    async def run(self, install_signals: bool = True) -> None:
        """Start, serve until stop() or a signal, drain, stop."""
        if install_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        # Stopping races starting: a SIGTERM while on_start waits (for peers, for a model to
        # load) stops the service within its drain time instead of after the wait.
        starting = asyncio.ensure_future(self.start())
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            starting.cancel()
            raise
        finally:
            stopping.cancel()
        if starting.done():
            starting.result()     # a start that failed raises here, as it always did
        else:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
        try:
            await self._stop.wait()
        finally:
            await self.shutdown()

    async def start(self) -> None:
        bus = self.config.bus
        if bus.key is not None:
            zap.admit(self.ctx, bus.key)   # before binding: no moment admits any client
            self._admitted = True
        self._router = make_socket(self.ctx, zmq.ROUTER, self._request_limits, bus.key)
        self._pub = make_socket(self.ctx, zmq.PUB, CONTROL, bus.key)
        try:
            self.rpc_port = bind(self._router, bus.host, self.config.rpc_port)
            self.pub_port = bind(self._pub, bus.host, self.config.pub_port)
        except BindError:
            # No shutdown follows a start that failed here: what it opened is closed now.
            self._router.close(linger=0)
            self._pub.close(linger=0)
            self._release_zap()
            raise
        loop = asyncio.get_running_loop()
        self._refused = [RefusedHandshakes(s, f"{self.name} {what}", bus.key is not None,
                                           self._say_refused)
                         for s, what in ((self._router, "requests"), (self._pub, "events"))]
        self._tasks += [loop.create_task(r.run()) for r in self._refused]
        self._tasks.append(loop.create_task(self._read_requests()))
        self.heartbeat_task = loop.create_task(self._heartbeat_loop())
        self._tasks.append(self.heartbeat_task)
        if bus.mdns:
            self._zc = open_zeroconf(bus.mdns_interfaces, bus.advertised)
            self._advertiser = Advertiser(self._zc, Candidate(**vars(self.identity()),
                                                              cluster=bus.cluster))
            self._tasks.append(loop.create_task(self._advertise()))
        if self.config.discover:
            self.directory = Directory(self.ctx, bus, me=self.name, zeroconf=self._zc)
            await self.directory.start()
            self.peers = Peers(self.ctx, self.directory, self.name, self.epoch)
        await self.on_start()
        self.state = "ready"
        self._publish_heartbeat()
        self.notifier.ready(f"{self.name} ready on {bus.advertised}:{self.rpc_port}")

    def stop(self) -> None:
        """Ask the service to drain and stop (safe from signal handlers)."""
        if self.state in ("ready", "starting"):
            self.state = "draining"
            self.notifier.stopping()
            self._publish_heartbeat()
        self._stop.set()

    async def shutdown(self) -> None:
        self.state = "draining"
        if self._inflight:
            await asyncio.wait(self._inflight, timeout=self.config.drain_timeout)
        await self.on_stop()
        self.state = "stopped"
        self._publish_heartbeat()
        if self.peers is not None:
            await self.peers.close()
        if self.directory is not None:
            await self.directory.stop()
        if self._advertiser is not None:
            try:
                await asyncio.wait_for(self._advertiser.stop(), 1.0)
            except Exception:  # best effort: heartbeats, not mDNS, decide liveness
                pass
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for r in self._refused:
            r.close()
        if self._zc is not None:
            await self._zc.async_close()
        self._router.close(linger=0)
        self._pub.close(linger=0)
        self._release_zap()

    def _release_zap(self) -> None:
        if self._admitted:
            self._admitted = False
            zap.release(self.ctx, self.config.bus.key)

    def _say_refused(self, text: str) -> None:
        self.counters["handshakes_refused"] += 1
        self.publish("service.warning", Event(topic="service.warning", service=self.name,
                                              data={"handshake": text}))

    async def _advertise(self) -> None:
        try:
            await self._advertiser.start()
        except Exception as e:  # mDNS is a hint; a service without it still serves static peers
            self.counters["mdns_errors"] += 1
            self.publish("service.warning", Event(topic="service.warning", service=self.name,
                                                  data={"mdns": repr(e)}))
