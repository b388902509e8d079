"""Loop detection over generated text: small models fall into loops of repeated lines, and of a
phrase repeated within one line ("I'm happy to help.You can reach me at my website.I'm happy...")."""

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


class PhraseLoopDetector:
    """Fires when the generated tokens end in one block of tokens repeated `repeats` times in a
    row, the block at most `max_tokens` long and its text non-trivial (at least `min_chars`
    non-whitespace characters: "0, 0, 0, " or a run of spaces is not a phrase).

    For a period p, the tail is a block of p tokens repeated r times once (r - 1) * p tokens in
    a row each equal the token p before them. Only the periods at which the new token occurred
    before (its recent positions) can extend a run; the others end by not being extended. So a
    token costs the number of its occurrences among the last `max_tokens`, not a pass over every
    period (that was 64 steps a token, a GPU batch's worth of host time at high throughput).
    """

    def __init__(self, repeats: int, max_tokens: int, min_chars: int):
        self.repeats = repeats
        self.max_tokens = max_tokens
        self.min_chars = min_chars
        self._n = 0                                   # tokens fed
        self._pieces: deque[str] = deque(maxlen=max_tokens)
        self._where: dict[int, deque[int]] = {}       # token id -> its recent positions
        self._runs: dict[int, tuple[int, int]] = {}   # period -> (run length, position it ends at)

    def feed(self, piece: str, token_id: int) -> str | None:
        """Take the next token and its text; return the repeating phrase once it hits the limit."""
        i, self._n = self._n, self._n + 1
        self._pieces.append(piece)
        found = None
        seen = self._where.get(token_id)
        if seen:
            while seen and seen[0] < i - self.max_tokens:
                seen.popleft()
            for j in reversed(seen):                  # the shortest period first
                p = i - j
                length, end = self._runs.get(p, (0, -2))
                length = length + 1 if end == i - 1 else 1
                self._runs[p] = (length, i)
                if found is None and length >= (self.repeats - 1) * p:
                    phrase = "".join(list(self._pieces)[-p:])
                    if sum(not c.isspace() for c in phrase) >= self.min_chars:
                        found = phrase
        self._where.setdefault(token_id, deque()).append(i)
        if i % (4 * self.max_tokens) == 0:            # forget tokens not seen for a while
            self._where = {t: q for t, q in self._where.items() if q[-1] >= i - self.max_tokens}
        return found
