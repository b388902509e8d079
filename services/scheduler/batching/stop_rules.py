"""Stop rules of one sequence: EOS, max tokens, stop strings held back across pieces, line and
phrase loops."""

from dataclasses import dataclass

from .loop_detect import LineLoopDetector, PhraseLoopDetector

FINISH_REASONS = ("stop", "length", "repeated_line_loop", "repeated_phrase_loop", "cancelled",
                  "failed")


@dataclass(frozen=True)
class Finish:
    """Why a sequence ended; `stop_string`/`stop_token` say which stop matched; a failed one has
    its failure code (wire.failures) and `detail` for people."""

    reason: str
    stop_string: str | None = None
    stop_token: int | None = None
    detail: str = ""
    code: str = ""


class StopState:
    """Feeds on each new token's text piece and says what the client may see now and whether to stop.

    Text that could be the start of a stop string is held back until it cannot be; a matched
    stop string and everything after it is never emitted.
    """

    def __init__(self, *, max_tokens: int, stop: tuple[str, ...] = (),
                 eos_ids: frozenset[int] = frozenset(), loop: LineLoopDetector | None = None,
                 phrase: PhraseLoopDetector | None = None):
        self.max_tokens = max_tokens
        self.stop = tuple(stop)
        self.eos_ids = eos_ids
        self.loop = loop
        self.phrase = phrase
        self.num_tokens = 0
        self._held = ""

    def feed(self, piece: str, token_id: int) -> tuple[str, Finish | None]:
        """Take one generated token and its decoded text; return (text to emit now, finish or None)."""
        self.num_tokens += 1
        if token_id in self.eos_ids:  # the EOS token's own text is never shown
            return self._flush(), Finish("stop", stop_token=token_id)
        self._held += piece
        hit = self._find_stop()
        if hit is not None:
            at, s = hit
            emit, self._held = self._held[:at], ""
            return emit, Finish("stop", stop_string=s)
        looping = self.loop.feed(piece) if self.loop is not None else None
        if looping is not None:
            return self._flush(), Finish("repeated_line_loop", detail=looping)
        looping = self.phrase.feed(piece, token_id) if self.phrase is not None else None
        if looping is not None:
            return self._flush(), Finish("repeated_phrase_loop", detail=looping)
        if self.num_tokens >= self.max_tokens:
            return self._flush(), Finish("length")
        if not self.stop:
            return self._flush(), None
        cut = len(self._held) - self._holdback()
        emit, self._held = self._held[:cut], self._held[cut:]
        return emit, None

    def _flush(self) -> str:
        out, self._held = self._held, ""
        return out

    def _find_stop(self) -> tuple[int, str] | None:
        # Held text holds no complete stop string before this piece, so search it whole. The stop
        # string that a character-by-character stream completes first wins (earliest end, then
        # earliest start), so where tokens happen to split the text never changes the answer.
        best = None
        for s in self.stop:
            at = self._held.find(s)
            if at >= 0 and (best is None or (at + len(s), at) < (best[0] + len(best[1]), best[0])):
                best = (at, s)
        return best

    def _holdback(self) -> int:
        """Length of the longest suffix of the held text that is a proper prefix of a stop string."""
        longest = max((len(s) for s in self.stop), default=0)
        for k in range(min(len(self._held), longest - 1), 0, -1):
            tail = self._held[-k:]
            if any(s.startswith(tail) for s in self.stop):
                return k
        return 0
