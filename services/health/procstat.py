"""CPU time and run state of a local process from /proc/PID/stat: the watcher's second
opinion on liveness."""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcSample:
    cpu_s: float          # user + system CPU seconds used so far
    stopped: bool         # stopped by a signal (T) or by a tracer (t): it runs no code now


def read_stat(pid: int) -> bytes | None:
    """The /proc/PID/stat line of `pid`; None if it is gone or /proc is not there."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read()
    except OSError:
        return None


def sample(pid: int) -> ProcSample | None:
    """CPU time and stopped state of `pid`; None if it is gone or /proc is not there."""
    stat = read_stat(pid)
    return None if stat is None else parse_stat(stat)


def parse_stat(stat: bytes) -> ProcSample | None:
    """The fields of one /proc/PID/stat line that the watcher reads; None if it is malformed."""
    # The command name (field 2) may hold spaces and parentheses: fields count from the last ')'.
    end = stat.rfind(b")")
    fields = stat[end + 2:].split() if end >= 0 else []
    try:
        # state (field 3), utime and stime (fields 14 and 15)
        return ProcSample((int(fields[11]) + int(fields[12])) / _TICKS, fields[0] in (b"T", b"t"))
    except (IndexError, ValueError):
        return None

