"""Turn generated token ids into text one token at a time without ever splitting a UTF-8 char.

A token may end inside a multi-byte character (emoji and CJK are often 2–4 byte tokens), so
bytes are held back until the character is complete; bytes that can never be valid become
U+FFFD, and `flush` ends the stream the same way.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence

from services.tokenizer.errors import BadTokenId


class IncrementalDecoder:
    """Feed token ids, get back only complete text; one decoder per generated sequence."""

    def __init__(self, token_bytes: Sequence[bytes]):
        # The table decides how special tokens read: b"" to hide them, their text to show them.
        self._bytes = token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Text made complete by this token (may be "", when it ends mid-character)."""
        if not isinstance(token_id, int) or not 0 <= token_id < len(self._bytes):
            raise BadTokenId(token_id, len(self._bytes))
        return self._utf8.decode(self._bytes[token_id])

    def push_many(self, token_ids: Iterable[int]) -> str:
        return "".join(self.push(t) for t in token_ids)

    def flush(self) -> str:
        """End of stream: whatever is held back, a truncated character as U+FFFD."""
        out = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return out

    @property
    def pending(self) -> bytes:
        """Bytes held back because they start a character not yet complete."""
        return self._utf8.getstate()[0]
