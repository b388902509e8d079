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

    For each period p it keeps how many tokens in a row equalled the token p before them; the
    tail is a block of p tokens repeated r times once that run reaches (r - 1) * p. That is
    O(max_tokens) work per token, with no search over the text.
    """

    def __init__(self, repeats: int, max_tokens: int, min_chars: int):
        self.repeats = repeats
        self.max_tokens = max_tokens
        self.min_chars = min_chars
        self._ids: deque[int] = deque(maxlen=max_tokens + 1)
        self._pieces: deque[str] = deque(maxlen=max_tokens)
        self._runs = [0] * (max_tokens + 1)      # _runs[p]: tokens in a row equal to the one p back

    def feed(self, piece: str, token_id: int) -> str | None:
        """Take the next token and its text; return the repeating phrase once it hits the limit."""
        ids, runs = self._ids, self._runs
        ids.append(token_id)
        self._pieces.append(piece)
        n = len(ids)
        found = None
        for p in range(1, min(n, self.max_tokens + 1)):
            runs[p] = runs[p] + 1 if ids[n - 1 - p] == token_id else 0
            if found is None and runs[p] >= (self.repeats - 1) * p:
                phrase = "".join(list(self._pieces)[-p:])
                if sum(not c.isspace() for c in phrase) >= self.min_chars:
                    found = phrase
        return found
