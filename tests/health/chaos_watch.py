"""What the chaos test watches on a running stack: token arrivals, the scheduler's counters,
every heartbeat (by name and epoch) and whether a process still exists."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import zmq.asyncio

from bus.config import BusConfig
from bus.directory import Directory
from bus.errors import BusError
from services.health.procstat import read_stat
from wire.messages.bus import Heartbeat, Status
from wire.messages.scheduler import StatsRequest

from ..serve.stack import call

# Counters that move when the scheduler notices a shard is gone (a failed batch, a gap, a
# pipeline change, a recovery).
NOTICE = ("driver.recoveries", "driver.pipeline_changes", "driver.waits.gap")


class Flow:
    """Arrival times of every stream's tokens."""

    def __init__(self, n: int):
        self.counts = [0] * n
        self.arrivals: list[tuple[float, int]] = []   # (time, stream)

    def saw(self, stream: int):
        def on_tokens(n_tokens: int) -> None:
            self.counts[stream] = n_tokens
            self.arrivals.append((time.monotonic(), stream))
        return on_tokens

    def total(self) -> int:
        return sum(self.counts)

    def first_after(self, t: float) -> float | None:
        return next((at for at, _ in self.arrivals if at > t), None)

    def first_of_after(self, stream: int, t: float) -> float | None:
        """When `stream`'s first tokens after `t` came."""
        return next((at for at, i in self.arrivals if i == stream and at > t), None)


class Watch:
    """A directory of the stack's bus (every heartbeat) and a poll of the scheduler's counters."""

    def __init__(self, stack):
        self.stack = stack
        self.heartbeats: dict[tuple[str, int], list[float]] = {}   # (name, epoch) -> times
        self.ready: dict[tuple[str, int], float] = {}   # (name, epoch) -> first heard ready
        self.pids: dict[tuple[str, int], int] = {}      # (name, epoch) -> its process
        self.noticed: list[float] = []       # when a NOTICE counter moved
        self.recovered: list[float] = []     # when driver.recoveries moved (re-prefill began)
        self._ctx = zmq.asyncio.Context()
        self.directory = Directory(self._ctx, BusConfig(cluster=stack.info["cluster"], mdns=False,
                                                        peers=tuple(stack.info["peers"]),
                                                        key=stack.key),
                                   me="chaos-watch")
        self.directory.on_event.append(self._heard)
        self._task: asyncio.Task | None = None
        self.stats: dict[str, float] = {}

    def _heard(self, topic: bytes, msg) -> None:
        hb = msg.body
        if isinstance(hb, Heartbeat):
            self.heartbeats.setdefault((hb.name, hb.epoch), []).append(time.monotonic())
            self.pids[(hb.name, hb.epoch)] = hb.pid
            if hb.state == "ready":
                self.ready.setdefault((hb.name, hb.epoch), time.monotonic())

    async def __aenter__(self) -> "Watch":
        await self.directory.start()
        self._task = asyncio.get_running_loop().create_task(self._poll())
        return self

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self.directory.stop()
        self._ctx.destroy(linger=0)

    async def _poll(self) -> None:
        last = recoveries = None
        while True:
            with contextlib.suppress(BusError):
                self.stats = (await call(self.stack.endpoint, StatsRequest(), timeout=2)).stats
                seen = sum(self.stats.get(k, 0) for k in NOTICE) + sum(
                    v for k, v in self.stats.items() if k.startswith("driver.batch_errors."))
                if last is not None and seen > last:
                    self.noticed.append(time.monotonic())
                r = self.stats.get("driver.recoveries", 0)
                if recoveries is not None and r > recoveries:
                    self.recovered.append(time.monotonic())
                last, recoveries = seen, r
            await asyncio.sleep(0.02)

    def noticed_after(self, t: float) -> float | None:
        return next((at for at in self.noticed if at > t), None)

    def recovered_after(self, t: float) -> float | None:
        return next((at for at in self.recovered if at > t), None)

    def epoch_of(self, name: str) -> int | None:
        e = self.directory.get(name)
        return e.epoch if e is not None else None

    def last_heartbeat(self, name: str, epoch: int) -> float:
        return self.heartbeats[(name, epoch)][-1]

    def first_heartbeat_after(self, name: str, epoch: int) -> float | None:
        """When a later epoch of `name` was first heard."""
        return min((times[0] for (n, e), times in self.heartbeats.items() if n == name and e > epoch),
                   default=None)

    def started_after(self, name: str, epoch: int) -> float | None:
        """When the process of the first later epoch of `name` was created (fork or exec)."""
        later = sorted(e for (n, e) in self.pids if n == name and e > epoch)
        return started_at(self.pids[(name, later[0])]) if later else None

    def ready_after(self, name: str, epoch: int) -> float | None:
        """When a later epoch of `name` was first heard ready."""
        return min((t for (n, e), t in self.ready.items() if n == name and e > epoch), default=None)

    async def pid_of(self, name: str) -> int:
        entry = self.directory.get(name)
        return (await call(entry.rpc_endpoint, Status(), timeout=2)).info["pid"]


def started_at(pid: int) -> float | None:
    """When process `pid` was created, on time.monotonic's clock (10 ms steps); None if gone."""
    stat = read_stat(pid)
    if stat is None:
        return None
    ticks = int(stat[stat.rindex(b")") + 2:].split()[19])    # field 22: starttime, since boot
    # /proc counts from boot on the clock that includes suspend; monotonic does not.
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()
    return ticks / os.sysconf("SC_CLK_TCK") - since_boot


async def gone_at(pid: int, every: float = 0.01) -> float:
    """When process `pid` stopped existing (the watcher reaps what it kills)."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return time.monotonic()
        await asyncio.sleep(every)
