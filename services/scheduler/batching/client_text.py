"""The text one request's client sees, decided in one place."""

from services.tokenizer.stream import IncrementalDecoder

from .stop_rules import Finish, StopState

# Endings where the text so far is the answer: bytes held for a character that never completed
# are shown (as U+FFFD). After EOS or a stop string nothing more is the client's.
_SHOWS_TAIL = frozenset({"length", "repeated_line_loop", "repeated_phrase_loop"})


class ClientText:
    """Turns one request's generated token ids into the text its client may see now.

    Owns the incremental decoder (never splits a UTF-8 character), the stop rules with the text
    they hold back, and the tail flushed when the sequence ends.
    """

    def __init__(self, decoder: IncrementalDecoder, stop: StopState):
        self._decoder = decoder
        self.stop = stop

    def accept(self, token_id: int) -> tuple[str, Finish | None]:
        """Take the next generated token; return (text to emit now, finish or None)."""
        text, finish = self.stop.feed(self._decoder.push(token_id), token_id)
        if finish is not None and finish.reason in _SHOWS_TAIL:
            text += self._decoder.flush()
        return text, finish
