"""CPU time of a local process from /proc/PID/stat: the watcher's second opinion on liveness."""

from __future__ import annotations

import os

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds `pid` has used; None if it is gone or /proc is not there."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields count from the last ')'.
    fields = stat[stat.rindex(b")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS   # utime, stime (fields 14 and 15)
    except (IndexError, ValueError):
        return None
