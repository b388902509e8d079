"""CPU time of a stack's processes and of the benchmark itself, read from /proc, so that a
level's row can say where the two cores went (the gateway, the bench's own clients, ...).

Linux only; elsewhere every figure is empty and the rows say nothing about CPU.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        out = []
        for t in tasks:
            out += [int(x) for x in (t / "children").read_text().split()]
        return out
    except OSError:
        return []


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK   # utime + stime


def _service_name(pid: int) -> str | None:
    """The `--name` a stack's child runs under (gateway-0, shard-0, ...)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for a, b in zip(args, args[1:]):
        if a == b"--name":
            return b.decode()
    return None


def stack_services(root: int) -> dict[str, int]:
    """name -> pid of every service under the process `root` (`llmbus up`)."""
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        name = _service_name(pid)
        if name is not None:
            out[name] = pid
        todo += _children(pid)
    return out


class CpuMeter:
    """CPU seconds each process used between start() and stop(); `bench` is this process."""

    def __init__(self, services: dict[str, int]):
        self.services = services
        self._t0: dict[str, float] = {}
        self.used: dict[str, float] = {}
        self.wall = 0.0

    def _now(self) -> dict[str, float]:
        now = {"bench": time.process_time()}
        for name, pid in self.services.items():
            s = _cpu_seconds(pid)
            if s is not None:
                now[name] = s
        return now

    def start(self) -> None:
        self._t0, self._w0 = self._now(), time.monotonic()

    def stop(self) -> dict[str, float]:
        now = self._now()
        self.wall = time.monotonic() - self._w0
        self.used = {k: now[k] - self._t0[k] for k in now if k in self._t0}
        return self.used

    def note(self, tokens: int) -> str:
        """e.g. 'cpu/token: bench 0.41ms gateway 0.93ms shards 12.0ms'."""
        if not tokens or not self.used:
            return ""
        per = {k: 1e3 * v / tokens for k, v in self.used.items()}
        shards = sum(v for k, v in per.items() if k.startswith("shard"))
        parts = [f"bench {per.get('bench', 0):.2f}"]
        for k in ("gateway-0", "scheduler-0", "tokenizer-0"):
            if k in per:
                parts.append(f"{k.split('-')[0]} {per[k]:.2f}")
        parts.append(f"shards {shards:.1f}")
        return "cpu ms/token: " + " ".join(parts)
