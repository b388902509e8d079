"""User text is never special: a chat's message contents are tokenized with special tokens off,
and only what the chat template itself writes (`<|im_start|>`, BOS...) is parsed for them.

A template renders text, and the text is tokenized after; to know which of it came from a
message, the contents go through the template wrapped in markers (random per render, so no
content can hold them), and the rendered text is cut at the markers. A template that cuts or
copies a content (`content.split('</think>')[-1]`) may leave a marker without its pair; a piece
next to a marker on the content's side is content all the same.

    parts = split(render(mark(messages, m)), m)     # [(text, is_content), ...]
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Markers:
    open: str
    close: str

    @classmethod
    def new(cls) -> "Markers":
        nonce = secrets.token_hex(12)
        return cls(f"\ue000{nonce}\ue001", f"\ue002{nonce}\ue003")


class SpecialTexts:
    """Finds the text of a special token in a string, in time linear in the string whatever it
    holds (a regex of thousands of alternatives takes a minute over 500 KB of '<')."""

    def __init__(self, texts):
        self.texts = frozenset(t for t in texts if t)
        self.first = frozenset(t[0] for t in self.texts)
        self.lengths: dict[str, tuple[int, ...]] = {}     # first two characters -> lengths
        for t in self.texts:
            self.lengths[t[:2]] = tuple(sorted({*self.lengths.get(t[:2], ()), len(t)}))

    def found_in(self, text: str) -> bool:
        for c in self.first:
            pos = text.find(c)
            while pos != -1:
                for key in (text[pos:pos + 2], c):
                    for n in self.lengths.get(key, ()):
                        if text[pos:pos + n] in self.texts:
                            return True
                pos = text.find(c, pos + 1)
        return False


def mark(messages: list[dict[str, Any]], m: Markers) -> list[dict[str, Any]]:
    """Copies of `messages` (contents already strings) with each non-empty content marked."""
    return [{**msg, "content": f"{m.open}{msg['content']}{m.close}"}
            if isinstance(msg.get("content"), str) and msg["content"] else msg
            for msg in messages]


def split(text: str, m: Markers) -> list[tuple[str, bool]]:
    """The rendered `text` as (piece, is_content) pieces, the markers removed."""
    pieces = re.split(f"({re.escape(m.open)}|{re.escape(m.close)})", text)
    out: list[tuple[str, bool]] = []
    for i in range(0, len(pieces), 2):
        before = pieces[i - 1] if i > 0 else None
        after = pieces[i + 1] if i + 1 < len(pieces) else None
        if pieces[i]:
            out.append((pieces[i], before == m.open or after == m.close))
    return out
