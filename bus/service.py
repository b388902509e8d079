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
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections import Counter
from typing import Any, Awaitable, Callable

import zmq
import zmq.asyncio

import wire
from wire.messages.bus import (Cancel, Echo, EchoReply, Error, Event, Heartbeat, Hello, Probe,
                               ProbeReply, Status, StatusReply, StreamEnd, Welcome)

from .config import ServiceConfig
from .directory import HEARTBEAT_TOPIC, Directory
from .errors import (BusError, CallTimeout, PeerDead, PeerRestarted, RemoteError, ServiceError,
                     ServiceNotFound)
from .mdns import Advertiser, Candidate, open_zeroconf
from .notify import Notifier
from .peers import Peers
from .sockets import bind, make_socket

Handler = Callable[[Any, wire.Message], Awaitable[Any]]


def handles(msg_cls: type) -> Callable[[Handler], Handler]:
    """Mark a method as the handler of one message type."""

    def mark(fn: Handler) -> Handler:
        fn.__handles__ = msg_cls.TYPE
        return fn

    return mark


def streams(msg_cls: type) -> Callable[[Handler], Handler]:
    """Mark an async generator method as the streaming handler of one message type."""

    def mark(fn: Handler) -> Handler:
        fn.__handles__ = msg_cls.TYPE
        fn.__streams__ = True
        return fn

    return mark


class _Gone(Exception):
    """The caller of a stream is unreachable (its connection closed): stop producing."""


class Service:
    kind = "service"

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
        self._handlers: dict[str, Handler] = self._handler_table()
        self._inflight: set[asyncio.Task] = set()
        self._streams: dict[tuple[bytes, int], asyncio.Task] = {}  # (caller, id) -> its handler task
        self._tasks: list[asyncio.Task] = []
        self._stop = asyncio.Event()
        self._router = self._pub = None
        self._zc = None
        self._advertiser: Advertiser | None = None
        self._hb_seq = 0

    # ------------------------------------------------------------------ what subclasses add
    def info(self) -> dict[str, Any]:
        """Extra facts advertised in heartbeats and status (a shard's layer range, say)."""
        return {}

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
        await self.start()
        try:
            await self._stop.wait()
        finally:
            await self.shutdown()

    async def start(self) -> None:
        bus = self.config.bus
        self._router = make_socket(self.ctx, zmq.ROUTER)
        self._pub = make_socket(self.ctx, zmq.PUB)
        self.rpc_port = bind(self._router, bus.host, self.config.rpc_port)
        self.pub_port = bind(self._pub, bus.host, self.config.pub_port)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._read_requests()))
        self.heartbeat_task = loop.create_task(self._heartbeat_loop())
        self._tasks.append(self.heartbeat_task)
        if bus.mdns:
            self._zc = open_zeroconf(bus.mdns_interfaces, bus.advertised)
            self._advertiser = Advertiser(self._zc, Candidate(
                cluster=bus.cluster, name=self.name, kind=self.kind, instance=self.instance,
                epoch=self.epoch, host=bus.advertised, rpc_port=self.rpc_port,
                pub_port=self.pub_port))
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
        if self._zc is not None:
            await self._zc.async_close()
        self._router.close(linger=0)
        self._pub.close(linger=0)

    async def _advertise(self) -> None:
        try:
            await self._advertiser.start()
        except Exception as e:  # mDNS is a hint; a service without it still serves static peers
            self.counters["mdns_errors"] += 1
            self.publish("service.warning", Event(topic="service.warning", service=self.name,
                                                  data={"mdns": repr(e)}))

    # ------------------------------------------------------------------ requests
    def _handler_table(self) -> dict[str, Handler]:
        table: dict[str, Handler] = {}
        for klass in reversed(type(self).__mro__):
            for attr in vars(klass).values():
                t = getattr(attr, "__handles__", None)
                if t is not None:
                    table[t] = attr
        return table

    async def _read_requests(self) -> None:
        # One reader per socket; it polls so that it is never cancelled mid-receive.
        while True:
            if not await self._router.poll(200):
                continue
            frames = await self._router.recv_multipart(copy=False)
            ident, rest = frames[0].bytes, frames[1:]
            try:
                msg = wire.decode(rest)
            except wire.BadFrame as e:
                self.counters["bad_frames"] += 1
                self.counters[f"bad_frames.{e.reason}"] += 1
                await self._send(ident, wire.Message(Error(code=e.code, message=str(e)[:500]),
                                                     id=e.msg_id, sender=self.name,
                                                     epoch=self.epoch))
                continue
            self.counters["requests"] += 1
            if isinstance(msg.body, Cancel):
                self._cancel_stream(ident, msg.body.id)
                continue
            task = asyncio.get_running_loop().create_task(self._serve(ident, msg))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    def _cancel_stream(self, ident: bytes, mid: int) -> None:
        task = self._streams.get((ident, mid))
        if task is not None:
            self.counters["streams_cancelled"] += 1
            task.cancel()

    async def _serve(self, ident: bytes, msg: wire.Message) -> None:
        handler = self._handlers.get(msg.type)
        try:
            if handler is None:
                raise ServiceError("unknown_method", f"{self.kind} does not handle {msg.type}")
            if self.state in ("draining", "stopped") and msg.type not in _ALWAYS:
                raise ServiceError("draining", f"{self.name} is shutting down", retry_after=1.0)
            if msg.deadline and time.time() > msg.deadline:
                raise ServiceError("deadline_exceeded", "request arrived after its deadline")
            if getattr(handler, "__streams__", False):
                if not await self._stream(ident, msg, handler):
                    return  # cancelled, or the caller is gone: nobody to answer
                body = StreamEnd()
            else:
                body = await handler(self, msg)
            self.progress += 1
        except ServiceError as e:
            self.counters[f"errors.{e.code}"] += 1
            body = Error(code=e.code, message=e.message, retry_after=e.retry_after)
        except BusError as e:  # a call this handler made to another service failed
            code = _BUS_ERROR_CODES.get(type(e), "upstream_failed")
            code = e.code if isinstance(e, RemoteError) else code
            self.counters[f"errors.{code}"] += 1
            body = Error(code=code, message=str(e)[:500])
        except Exception as e:  # a handler bug answers the caller and keeps the loop alive
            self.counters["errors.internal"] += 1
            body = Error(code="internal", message=f"{type(e).__name__}: {e}"[:500])
        await self._send(ident, msg.reply(body, self.name, self.epoch))

    async def _stream(self, ident: bytes, msg: wire.Message, handler) -> bool:
        """Send every body the generator yields; False when it was cancelled or the caller left."""
        key = (ident, msg.id)
        self._streams[key] = asyncio.current_task()
        gen = handler(self, msg)
        try:
            async for body in gen:
                if not await self._send(ident, msg.reply(body, self.name, self.epoch)):
                    raise _Gone()
                self.progress += 1
            return True
        except (asyncio.CancelledError, _Gone) as e:
            # Closing the generator runs its finally blocks (a request frees its resources).
            await gen.aclose()
            self.counters["streams_gone" if isinstance(e, _Gone) else "streams_stopped"] += 1
            return False
        finally:
            self._streams.pop(key, None)

    async def _send(self, ident: bytes, msg: wire.Message) -> bool:
        """Send to one caller; False when it is unreachable (ROUTER_MANDATORY says so)."""
        try:
            await self._router.send_multipart([ident] + wire.encode(msg), copy=False)
            return True
        except zmq.ZMQError:
            self.counters["send_errors"] += 1
            return False

    # ------------------------------------------------------------------ events
    def publish(self, topic: str, body: Any) -> None:
        """Publish an event; PUB never blocks (slow subscribers drop at their HWM)."""
        if self._pub is None:
            return
        frames = [topic.encode()] + wire.encode(wire.Message(body, sender=self.name, epoch=self.epoch))
        try:
            self._pub.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.ZMQError:
            self.counters["publish_dropped"] += 1

    def _heartbeat(self) -> Heartbeat:
        self._hb_seq += 1
        return Heartbeat(name=self.name, kind=self.kind, instance=self.instance, epoch=self.epoch,
                         state=self.state, load=self.load, progress=self.progress,
                         seq=self._hb_seq, host=self.config.bus.advertised,
                         rpc_port=self.rpc_port, pub_port=self.pub_port, info=self.info())

    def _publish_heartbeat(self) -> None:
        self.publish(HEARTBEAT_TOPIC.decode(), self._heartbeat())

    async def _heartbeat_loop(self) -> None:
        interval = self.config.bus.heartbeat_interval
        last_progress, last_change = self.progress, time.monotonic()
        while True:
            await asyncio.sleep(interval)
            self._publish_heartbeat()
            now = time.monotonic()
            if self.progress != last_progress:
                last_progress, last_change = self.progress, now
            # WATCHDOG=1 only while the loop runs and work moves (or there is none).
            stuck_for = now - last_change
            if self.load == 0 or stuck_for < (self.notifier.watchdog_interval or 30.0):
                self.notifier.watchdog()

    # ------------------------------------------------------------------ bus.* handlers
    @handles(Hello)
    async def _hello(self, msg: wire.Message) -> Welcome:
        return Welcome(name=self.name, kind=self.kind, instance=self.instance, epoch=self.epoch,
                       cluster=self.config.bus.cluster, host=self.config.bus.advertised,
                       rpc_port=self.rpc_port, pub_port=self.pub_port, state=self.state,
                       info=self.info())

    @handles(Status)
    async def _status(self, msg: wire.Message) -> StatusReply:
        counters = dict(self.counters)
        if self.directory is not None:
            counters.update({f"directory.{k}": v for k, v in self.directory.counters.items()})
        return StatusReply(name=self.name, kind=self.kind, instance=self.instance,
                           epoch=self.epoch, state=self.state, load=self.load,
                           progress=self.progress, uptime=time.monotonic() - self.started_at,
                           counters=counters,
                           info={**self.info(), "host": socket.gethostname(), "pid": os.getpid(),
                                 "peers": [e.name for e in self.directory.live()] if self.directory else []})

    @handles(Echo)
    async def _echo(self, msg: wire.Message) -> EchoReply:
        # A received tensor goes back out as its own frames: no decode, no copy.
        return EchoReply(text=msg.body.text, payload=msg.body.payload)

    @handles(Probe)
    async def _probe(self, msg: wire.Message) -> ProbeReply:
        if self.peers is None:
            raise ServiceError("no_directory", f"{self.name} runs without discovery")
        target = msg.body.target
        client = await self.peers.client(target, wait=msg.body.timeout)
        t0 = time.perf_counter()
        await client.call(Echo(text=f"probe from {self.name}"), msg.body.timeout)
        return ProbeReply(target=target, epoch=client.peer_epoch, endpoint=client.endpoint,
                          rtt_ms=(time.perf_counter() - t0) * 1e3)


_BUS_ERROR_CODES = {ServiceNotFound: "not_found", CallTimeout: "timeout", PeerDead: "peer_dead",
                    PeerRestarted: "peer_restarted"}
_ALWAYS = frozenset({Hello.TYPE, Status.TYPE, Echo.TYPE})
