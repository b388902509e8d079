"""Download progress as people read it: bytes so far of the whole, the rate, the time left.

On a terminal one line redrawn in place; elsewhere (a log, a pipe) a line every few seconds and
one at the end, so that `llmbus up --detach` can relay them.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TextIO


def size_text(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def duration_text(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def progress_line(what: str, done: int, total: int | None, rate: float | None) -> str:
    """'downloading X: 12.3 MB of 92.9 MB (13%), 10.2 MB/s, 8s left' (parts unknown left out)."""
    parts = [size_text(done) + (f" of {size_text(total)} ({100 * done // total}%)"
                                if total else "")]
    if rate is not None:
        parts.append(f"{size_text(rate)}/s")
        if total and rate > 0:
            parts.append(f"{duration_text(max(0, total - done) / rate)} left")
    return f"downloading {what}: " + ", ".join(parts)


class Progress:
    """Feed it the bytes downloaded so far (update) and once at the end (finish)."""

    def __init__(self, what: str, total: int | None, out: TextIO, *, tty: bool | None = None,
                 every_s: float | None = None, clock=time.monotonic):
        self.what, self.total, self.out, self.clock = what, total, out, clock
        self.tty = out.isatty() if tty is None else tty
        self.every_s = every_s if every_s is not None else (0.25 if self.tty else 2.0)
        self._samples: deque[tuple[float, int]] = deque()
        self._start = clock()
        self._last_shown = float("-inf")

    def rate(self) -> float | None:
        """Bytes a second over the last 3 s (None until there are two samples)."""
        if len(self._samples) < 2 or self._samples[-1][0] <= self._samples[0][0]:
            return None
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0)

    def update(self, done: int) -> None:
        """done: the bytes so far, as read now; a reading below an earlier one (pip moves the
        finished file out of the folder that is watched) counts as that one."""
        now = self.clock()
        if self._samples:
            done = max(done, self._samples[-1][1])
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > 3.0:
            self._samples.popleft()
        if now - self._last_shown >= self.every_s:
            self._last_shown = now
            self._show(progress_line(self.what, done, self.total, self.rate()))

    def finish(self, done: int) -> None:
        took = max(self.clock() - self._start, 1e-9)
        line = (f"downloaded {self.what}: {size_text(done)} in {duration_text(took)} "
                f"({size_text(done / took)}/s)")
        self._show(line)
        if self.tty:
            self.out.write("\n")
            self.out.flush()

    def _show(self, line: str) -> None:
        if self.tty:
            self.out.write("\r\x1b[K" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()
