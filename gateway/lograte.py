"""A repeated failure logged once per interval with how often it happened, so that a fault every
request meets (no file descriptors left, a bug) writes a line a minute, not a traceback each.
Only the first of a run carries its traceback, and a traceback is cut to its last frames."""

from __future__ import annotations

import logging
import sys
import time
import traceback
from collections.abc import Callable, Hashable

MAX_KEYS = 256          # distinct failures remembered (the oldest is forgotten past it)
TRACEBACK_FRAMES = 8    # a traceback's last frames (a RecursionError's would be thousands)


class RateLimitedLog:
    def __init__(self, log: logging.Logger, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.log = log
        self.interval_s = interval_s
        self.clock = clock
        self._seen: dict[Hashable, list] = {}     # key -> [last logged at, repeats since]

    def exception(self, key: Hashable, fmt: str, *args) -> bool:
        """Log the exception being handled under `key`, unless one of the same key was logged
        within the interval (then it is counted, and the next line says how many). Whether it
        was logged."""
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.interval_s:
            seen[1] += 1
            return False
        repeats = seen[1] if seen is not None else 0
        if len(self._seen) >= MAX_KEYS and key not in self._seen:
            self._seen.pop(next(iter(self._seen)))
        self._seen[key] = [now, 0]
        suffix = (f" (and {repeats} more like it in the last {self.interval_s:g} s)"
                  if repeats else "")
        self.log.error(fmt + "%s\n%s", *args, suffix, short_traceback())
        return True


def short_traceback() -> str:
    """The exception being handled, with its last TRACEBACK_FRAMES frames."""
    kind, value, tb = sys.exc_info()
    if kind is None:
        return ""
    return "".join(traceback.format_exception(kind, value, tb, limit=-TRACEBACK_FRAMES)).rstrip()
