"""Recent token throughput, measured from completed micro-batches, for retry-after estimates."""

from collections import deque


class Throughput:
    """Tokens per second over a sliding window of completions."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self._since: float | None = None  # when the first batch of the window was sent

    def started(self, now: float) -> None:
        """A batch was sent into an idle pipeline: with nothing measured recently, start anew."""
        self._prune(now)
        if not self._events:
            self._since = now

    def record(self, now: float, tokens: int) -> None:
        self._events.append((now, tokens))

    def rate(self, now: float) -> float | None:
        """Tokens per second over the window, or None when nothing was measured recently."""
        self._prune(now)
        if not self._events or self._since is None:
            return None
        span = now - max(self._since, now - self.window_s)
        if span <= 0:
            return None
        return sum(n for _, n in self._events) / span

    def _prune(self, now: float) -> None:
        while self._events and self._events[0][0] < now - self.window_s:
            self._events.popleft()
