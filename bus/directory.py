"""The directory of live services: candidates from mDNS and static peers, confirmed by
handshake, kept alive by the heartbeats heard on their PUB sockets."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Callable

import zmq
import zmq.asyncio

import wire
from wire.messages.bus import Heartbeat, Welcome

from .client import RpcClient
from .config import BusConfig, parse_peer
from .errors import BusError, CallTimeout, ServiceNotFound
from .liveness import LivenessTable, PeerEntry
from .mdns import Browser, Candidate, open_zeroconf
from .sockets import SUBSCRIPTIONS, endpoint, make_socket

HEARTBEAT_TOPIC = b"bus.heartbeat"

log = logging.getLogger("llmbus.bus")

# Bounds that hold whatever mDNS says: a flood of forged records (thousands of endpoints) may
# cost at most this many sockets in handshakes at once, this many candidates waiting (the newest
# kept: a real service announcing itself after the flood is confirmed next, not after it), and
# this many remembered errors.
MAX_HANDSHAKES = 16
MAX_WAITING = 256
MAX_ERRORS = 64
# A candidate whose hello went unanswered is asked again, after RETRY_FIRST s, then twice as long
# each time up to RETRY_MAX, for RETRY_FOR s: a peer busy starting on a loaded machine may answer
# its first hello late, and mDNS tells of it only once. One that never answers is a record that
# outlived its process (they linger for minutes); at most MAX_WAITING are retried at once.
RETRY_FIRST, RETRY_MAX, RETRY_FOR = 0.5, 8.0, 120.0


class Directory:
    """Run inside any process that needs to find others (services, busctl, the gateway)."""

    def __init__(self, ctx: zmq.asyncio.Context, config: BusConfig, me: str = "directory",
                 zeroconf=None, topics: tuple[bytes, ...] = (HEARTBEAT_TOPIC,)):
        self.ctx = ctx
        self.config = config
        self.me = me
        self.table = LivenessTable(config.dead_after)
        self.counters = {"handshakes": 0, "handshake_failures": 0, "wrong_cluster": 0,
                         "mdns_candidates": 0, "bad_frames": 0, "restarts_seen": 0,
                         "name_clashes": 0, "candidates_dropped": 0}
        self._clash_said: dict[str, tuple[str, ...]] = {}
        # endpoint -> why its handshake failed, the latest MAX_ERRORS of them
        self.last_errors: OrderedDict[str, str] = OrderedDict()
        self.on_event: list[Callable[[bytes, wire.Message], None]] = []
        self.on_expire: list[Callable[[PeerEntry], None]] = []
        # (old, new): a name's process was replaced by a new epoch before the old one expired.
        self.on_replaced: list[Callable[[PeerEntry, PeerEntry], None]] = []
        self._zc = zeroconf
        self._own_zc = False
        self._browser: Browser | None = None
        self._sub = make_socket(ctx, zmq.SUB, SUBSCRIPTIONS, key=config.key)
        for t in topics:
            self._sub.setsockopt(zmq.SUBSCRIBE, t)
        self._subscribed: set[str] = set()
        self._confirmed: dict[str, int] = {}        # rpc endpoint -> epoch confirmed
        self._inflight: set[str] = set()
        self._tasks: list[asyncio.Task] = []
        self._confirming: set[asyncio.Task] = set()   # handshakes started by mDNS candidates
        self._waiting: OrderedDict[str, Candidate] = OrderedDict()   # endpoint -> candidate
        # endpoint -> (first failure, next delay) of candidates whose hello went unanswered
        self._retrying: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._changed = asyncio.Event()
        self._closed = False
        self._listened: float | None = None        # when the reader last emptied its socket

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.config.mdns:
            if self._zc is None:
                self._zc = open_zeroconf(self.config.mdns_interfaces, self.config.advertised)
                self._own_zc = True
            self._browser = Browser(self._zc, self._on_candidate)
            self._browser.start()
        self._tasks = [loop.create_task(self._read_heartbeats()),
                       loop.create_task(self._static_peers())]

    async def stop(self) -> None:
        self._closed = True
        if self._browser is not None:
            await self._browser.stop()
        # A handshake still running holds an open socket, and a context cannot end while one is
        # open: cancel them (each closes its client on the way out) before the owner ends it.
        for t in self._confirming:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._confirming, return_exceptions=True)
        self._sub.close(linger=0)
        if self._own_zc and self._zc is not None:
            await self._zc.async_close()

    # ------------------------------------------------------------------ queries
    def _now(self) -> float:
        """The time liveness is judged at: no later than shortly after this directory last read
        its socket. A stalled event loop (a long decode, say) has heartbeats queued but unread;
        they are not missing, and the peers that sent them are not dead."""
        now = time.monotonic()
        if self._listened is None:
            return now
        return min(now, self._listened + self.config.heartbeat_interval)

    def live(self) -> list[PeerEntry]:
        now = self._now()
        return [e for e in self.table.live(now) if e.name != self.me]

    def get(self, name: str) -> PeerEntry | None:
        e = self.table.entries.get(name)
        return e if e is not None and self.table.is_alive(e, self._now()) else None

    def clashes(self) -> dict[str, tuple[str, ...]]:
        """Names that two live processes use, with both addresses (see LivenessTable)."""
        return self.table.clashing(time.monotonic())

    def of_kind(self, kind: str) -> list[PeerEntry]:
        return [e for e in self.live() if e.kind == kind]

    def pick(self, kind: str, model: str | None = None) -> PeerEntry | None:
        """The least loaded ready service of `kind` (serving `model`, when given); None if none
        is. Where requests go when any service of a kind will do."""
        ready = [e for e in self.of_kind(kind) if e.state == "ready"
                 and (model is None or e.info.model == model)]
        return min(ready, key=lambda e: e.load) if ready else None

    async def wait_for(self, name: str, timeout: float) -> PeerEntry:
        deadline = time.monotonic() + timeout
        while True:
            e = self.get(name)
            if e is not None:
                return e
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServiceNotFound(f"{name!r} not found: {self.explain()}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.25))
            except asyncio.TimeoutError:
                pass

    def explain(self) -> str:
        """Why nothing (or not everything) is seen, in words a person can act on."""
        parts = [f"cluster {self.config.cluster!r}"
                 + (" (CURVE on: only holders of its key file answer)" if self.config.key else "")]
        if not self.config.mdns:
            parts.append("mDNS off")
        elif self._browser is not None:
            parts.append(f"mDNS on {list(self.config.mdns_interfaces) or self.config.advertised}: "
                         f"{self._browser.records_seen} records resolved, "
                         f"{self.counters['wrong_cluster']} of another cluster")
            if self._browser.records_seen == 0:
                parts.append("no mDNS answers (multicast blocked? wrong interface?)")
        if self.config.peers:
            parts.append(f"static peers {list(self.config.peers)}")
        elif not self.config.mdns:
            parts.append("no static peers configured (--peer HOST:PORT or LLMBUS_PEERS)")
        for ep, why in list(self.last_errors.items())[-5:]:
            parts.append(f"{ep}: {why}")
        live = [e.name for e in self.live()]
        parts.append(f"live: {live or 'none'}")
        return "; ".join(parts)

    def _curve_hint(self, e: Exception) -> str:
        # A CURVE handshake that fails is silent on both sides: the caller only sees no answer.
        if not isinstance(e, CallTimeout):
            return ""
        if self.config.key is not None:
            return (": CURVE is on here, and a peer without this cluster's key file (or with "
                    "another's) never answers")
        return ": if its cluster uses CURVE keys, give the key file (--key-file or LLMBUS_KEY_FILE)"

    # ------------------------------------------------------------------ discovery
    def _on_candidate(self, c: Candidate) -> None:
        self.counters["mdns_candidates"] += 1
        self._consider(c)

    def _consider(self, c: Candidate) -> None:
        if c.name == self.me:
            return
        if c.cluster != self.config.cluster:
            self.counters["wrong_cluster"] += 1
            return
        ep = endpoint(c.host, c.rpc_port)
        known = self.get(c.name)
        if known is not None and known.epoch >= c.epoch:
            return
        if ep in self._inflight or self._closed:
            return
        self._waiting.pop(ep, None)
        self._waiting[ep] = c                   # the newest last: confirmed first
        if len(self._waiting) > MAX_WAITING:
            self._waiting.popitem(last=False)   # the oldest waiting candidate is forgotten
            self.counters["candidates_dropped"] += 1
        self._confirm_waiting()

    def _confirm_waiting(self) -> None:
        """Start handshakes with waiting candidates, newest first, at most MAX_HANDSHAKES at once
        (static peers' handshakes count too)."""
        while self._waiting and len(self._confirming) < MAX_HANDSHAKES and not self._closed:
            ep, c = self._waiting.popitem(last=True)
            if ep in self._inflight:
                continue
            self._inflight.add(ep)
            task = asyncio.get_running_loop().create_task(self._confirm_candidate(ep, c))
            self._confirming.add(task)
            task.add_done_callback(self._confirmed_one)

    def _confirmed_one(self, task: asyncio.Task) -> None:
        self._confirming.discard(task)
        if not self._closed:
            self._confirm_waiting()

    async def _confirm_candidate(self, ep: str, c: Candidate) -> None:
        try:
            await self._confirm(ep, source="mdns")
            self._retrying.pop(ep, None)
        except _Unanswered:
            self._retry_later(ep, c)

    def _retry_later(self, ep: str, c: Candidate) -> None:
        now = time.monotonic()
        first, delay = self._retrying.pop(ep, (now, RETRY_FIRST))
        if self._closed or now + delay - first > RETRY_FOR:
            return
        self._retrying[ep] = (first, min(2 * delay, RETRY_MAX))
        if len(self._retrying) > MAX_WAITING:
            self._retrying.popitem(last=False)
        asyncio.get_running_loop().call_later(delay, self._again, ep, c)

    def _again(self, ep: str, c: Candidate) -> None:
        # (Not if forgotten meanwhile: an answer, another flood of candidates, or the end.)
        if ep in self._retrying and not self._closed:
            self._consider(c)

    def _error(self, ep: str, why: str) -> None:
        self.last_errors.pop(ep, None)
        self.last_errors[ep] = why
        while len(self.last_errors) > MAX_ERRORS:
            self.last_errors.popitem(last=False)

    @property
    def handshakes_in_flight(self) -> int:
        return len(self._confirming)

    @property
    def candidates_waiting(self) -> int:
        return len(self._waiting)

    async def _static_peers(self) -> None:
        eps = [endpoint(*parse_peer(p)) for p in self.config.peers]
        while not self._closed and eps:
            # Its own entry counts as known too (llmbus up gives every service its own address
            # as a peer): without it, the service handshook with itself every interval. The
            # handshakes run side by side, so one dead peer's timeout delays nobody else.
            known = {e.rpc_endpoint for e in self.table.live(self._now())}
            for ep in eps:
                if ep not in known and ep not in self._inflight:
                    self._inflight.add(ep)   # confirm() adds it too; here so the loop sees it now
                    task = asyncio.get_running_loop().create_task(self.confirm(ep, source="static"))
                    self._confirming.add(task)
                    task.add_done_callback(self._confirmed_one)
            await asyncio.sleep(self.config.heartbeat_interval)

    async def confirm(self, ep: str, source: str) -> PeerEntry | None:
        """Handshake with an endpoint; on success, subscribe to its heartbeats. None when it did
        not answer or belongs to another cluster (last_errors says which)."""
        try:
            return await self._confirm(ep, source)
        except _Unanswered:
            return None

    async def _confirm(self, ep: str, source: str) -> PeerEntry | None:
        """confirm(), but _Unanswered when no valid welcome came."""
        self._inflight.add(ep)
        client = RpcClient(self.ctx, ep, sender=self.me, name=ep, key=self.config.key)
        try:
            w: Welcome = await client.handshake(self.config.cluster, timeout=1.0)
        except (BusError, wire.BadFrame) as e:
            self.counters["handshake_failures"] += 1
            self._error(ep, f"handshake failed ({e}){self._curve_hint(e)}")
            raise _Unanswered(ep) from e
        finally:
            await client.close()
            self._inflight.discard(ep)
        if w.cluster != self.config.cluster:
            self.counters["wrong_cluster"] += 1
            self._error(ep, f"belongs to cluster {w.cluster!r}")
            return None
        self.counters["handshakes"] += 1
        self.last_errors.pop(ep, None)
        entry = PeerEntry.of(w, source)
        # A handshake proves who answers, once per epoch; after that only heartbeats keep a
        # peer alive (a process whose heartbeats stopped is dead even if its socket answers).
        if self._confirmed.get(ep) != w.epoch:
            self._confirmed[ep] = w.epoch
            self._observe(entry)
        pub = endpoint(w.host, w.pub_port)
        if pub not in self._subscribed:
            self._sub.connect(pub)
            self._subscribed.add(pub)
        return entry

    def _observe(self, entry: PeerEntry) -> None:
        old = self.table.entries.get(entry.name)
        change = self.table.observe(entry, time.monotonic())
        if change == "clash":
            eps = self.table.clashes[entry.name][1]
            if self._clash_said.get(entry.name) != eps:
                self._clash_said[entry.name] = eps
                self.counters["name_clashes"] += 1
                log.warning("two live services are named %r: %s; the one heard first keeps the "
                            "name while it lives: give each its own --name", entry.name,
                            " and ".join(eps))
            return
        if change == "restarted":
            self.counters["restarts_seen"] += 1
            if old is not None:
                # The old process is gone without having expired (a handshake or heartbeat of
                # the new one came first, maybe while the old was already dead by time): its
                # calls must fail now, as an expiry would have failed them.
                for cb in self.on_replaced:
                    cb(old, entry)
        self._changed.set()

    async def _read_heartbeats(self) -> None:
        last_expire = 0.0
        while not self._closed:
            if not await self._sub.poll(100) or await self._drain():
                self._listened = time.monotonic()
            now = self._now()
            if now - last_expire > self.config.heartbeat_interval / 2:
                for dead in self.table.expire(now):
                    for cb in self.on_expire:
                        cb(dead)
                last_expire = now

    async def _drain(self, most: int = 1000) -> bool:
        """Read what is queued, up to `most` messages; True when the socket was emptied."""
        for _ in range(most):
            try:
                frames = await self._sub.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return True
            try:
                msg = wire.decode(frames[1:])
            except wire.BadFrame:
                self.counters["bad_frames"] += 1
                continue
            topic = bytes(frames[0].buffer)
            if isinstance(msg.body, Heartbeat):
                self._observe(PeerEntry.of(msg.body, "heartbeat"))
            for cb in self.on_event:
                cb(topic, msg)
        return False

    def subscribe(self, topic: bytes) -> None:
        self._sub.setsockopt(zmq.SUBSCRIBE, topic)


class _Unanswered(Exception):
    """A handshake that got no valid welcome (no reply in time, or a bad one)."""
