"""Repeated-line loop detection over generated text: small models fall into line loops."""

from collections import deque


class LineLoopDetector:
    """Fires when one non-trivial line occurs `repeats` times among the last `window` such lines.

    A window rather than strict adjacency also catches short cycles (A B A B ...). Trivial lines
    (fewer than `min_chars` non-whitespace characters: braces, blank lines) are ignored so that
    code and lists do not trip it.
    """

    def __init__(self, repeats: int, window: int, min_chars: int):
        self.repeats = repeats
        self.min_chars = min_chars
        self._recent: deque[str] = deque(maxlen=window)
        self._line = ""

    def feed(self, piece: str) -> str | None:
        """Take the next text piece; return the looping line once it hits the limit, else None."""
        *done, self._line = (self._line + piece).split("\n")
        for raw in done:
            line = raw.strip()
            if sum(not c.isspace() for c in line) < self.min_chars:
                continue
            self._recent.append(line)
            if self._recent.count(line) >= self.repeats:
                return line
        return None
