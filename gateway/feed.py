"""The cluster's snapshot, asked of the bus at most once per `period` however many clients read
it (`/v1/cluster`, and its live form: a server-sent event on each change, and at least every
`every` seconds, for the web page).

Each refresh asks every health watcher for its services (`health.status`) and the serving
scheduler for its stats; a watcher or scheduler that does not answer in time is left out of that
snapshot, never a failure of it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from bus.directory import Directory
from bus.errors import BusError
from bus.peers import Peers
from wire.messages.health import HealthStatus, HealthStatusReply

from . import cluster

WATCHER_TIMEOUT = 1.0


class ClusterFeed:
    def __init__(self, directory: Directory, peers: Peers,
                 stats: Callable[[], Awaitable[dict[str, float]]],
                 serving: Callable[[], dict[str, Any]], period: float = 0.25, every: float = 1.0):
        """`stats`: the serving scheduler's stats ({} when none answers); `serving`: what the
        gateway adds of its own (the model, what is missing)."""
        self.directory, self.peers, self.stats, self.serving = directory, peers, stats, serving
        self.period, self.every = period, every
        self.memory: cluster.Remembered = {}
        self.stopping = False
        self._snap: dict[str, Any] | None = None
        self._at = -float("inf")
        self._lock = asyncio.Lock()

    async def snapshot(self) -> dict[str, Any]:
        """The cluster now (one refresh serves every reader within `period`)."""
        async with self._lock:
            if time.monotonic() - self._at >= self.period:
                self._snap = await self._refresh()
                self._at = time.monotonic()
            return self._snap

    async def changes(self) -> AsyncIterator[dict[str, Any]]:
        """Snapshots: the first at once, then each that differs from the last sent (heartbeat
        ages aside) and, failing a change, one every `every` seconds; ends when the gateway
        stops. A service restarted since the last one sent, and serving in both, is shown down
        once first (`cluster.unseen_outages`): no restart passes unseen between samples."""
        last_key, sent_at, shown = None, 0.0, {}
        while not self.stopping:
            snap = await self.snapshot()
            # A respawn between two samples is shown for one period, then the present.
            snap = cluster.unseen_outages(shown, snap) or snap
            key = _key(snap)
            if key != last_key or time.monotonic() - sent_at >= self.every:
                # What a snapshot without a watcher's answer cannot tell is kept from before.
                last_key, sent_at, shown = key, time.monotonic(), {**shown, **cluster.shown(snap)}
                yield snap
            await asyncio.sleep(self.period)

    async def _refresh(self) -> dict[str, Any]:
        entries = self.directory.live()
        # Together: a slow scheduler must not make the watchers' states late.
        stats, *replies = await asyncio.gather(
            self.stats(), *(self._status(e.name) for e in entries if e.kind == "health"))
        watchers = [w for w in replies if w is not None]
        self.memory = cluster.remember(self.memory, entries, watchers)
        snap = cluster.snapshot(entries, time.monotonic(), watchers, stats, self.memory,
                                self.directory.me)
        snap.update(self.serving())
        return snap

    async def _status(self, watcher: str) -> HealthStatusReply | None:
        try:
            return await self.peers.call(watcher, HealthStatus(), timeout=WATCHER_TIMEOUT)
        except BusError:
            return None


def _key(snap: dict[str, Any]) -> str:
    """What a change is: anything but the heartbeat ages, which move on every refresh."""
    return json.dumps({**snap, "services": [{**s, "heartbeat_age_s": None}
                                            for s in snap["services"]]},
                      sort_keys=True, default=str)
