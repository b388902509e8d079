"""Tool calls in a model's output, found as the text streams in (pure: no I/O).

The format is the one the built-in tool prompt asks for (services/tokenizer/tool_prompt.py)
and the one Hermes-, Qwen- and SmolLM-style templates use:
`<tool_call>{"name": "f", "arguments": {...}}</tool_call>`. A block counts as a call only when
its JSON is an object with a declared function's `name` and `arguments` an object (or a JSON
string of one); anything else -- unclosed, bad JSON, an unknown name -- comes back as the text
it was, so output that merely looks like a call is never lost and never raises. A block ends at
the first `</tool_call>` outside the JSON's strings: an argument may hold that text (a grammar
lets a string hold anything, and a sampled model that means to end the call may write it there).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Union

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolCall:
    index: int               # 0, 1, ... in the order of the output
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


Piece = Union[Text, ToolCall]


class ToolCallStream:
    """Feed the output's text as it comes; get text and whole tool calls back in order.

    Text that could be the start of `<tool_call>` is held back until it is known not to be,
    and a call's text is held until its block closes; `finish()` flushes what is left.
    """

    def __init__(self, names: Iterable[str] | None = None):
        self.names = None if names is None else set(names)
        self._buf = ""
        self._in_call = False
        self._calls = 0

    def feed(self, text: str) -> list[Piece]:
        self._buf += text
        out: list[Piece] = []
        while True:
            if self._in_call:
                end = _close_outside_strings(self._buf, len(OPEN))
                if end < 0:
                    return out
                body, block = self._buf[len(OPEN):end], self._buf[:end + len(CLOSE)]
                self._buf = self._buf[end + len(CLOSE):]
                self._in_call = False
                out.append(self._call(body, block))
            else:
                start = self._buf.find(OPEN)
                if start < 0:
                    keep = _partial_open(self._buf)
                    _text(out, self._buf[:len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep:]
                    return out
                _text(out, self._buf[:start])
                self._buf = self._buf[start:]
                self._in_call = True

    def finish(self) -> list[Piece]:
        """The rest: an unclosed block is a call if its JSON is whole (models often end with
        their end-of-turn token instead of the closing tag), else text."""
        out: list[Piece] = []
        if self._in_call:
            out.append(self._call(self._buf[len(OPEN):], self._buf))
        else:
            _text(out, self._buf)
        self._buf, self._in_call = "", False
        return out

    def _call(self, body: str, block: str) -> Piece:
        parsed = _parse_call(body, self.names)
        if parsed is None:
            return Text(block)
        call = ToolCall(self._calls, *parsed)
        self._calls += 1
        return call


def parse(text: str, names: Iterable[str] | None = None) -> tuple[str, list[ToolCall]]:
    """A whole output's text (calls taken out) and its tool calls."""
    s = ToolCallStream(names)
    pieces = s.feed(text) + s.finish()
    return ("".join(p.text for p in pieces if isinstance(p, Text)),
            [p for p in pieces if isinstance(p, ToolCall)])


def _parse_call(body: str, names: set[str] | None) -> tuple[str, dict] | None:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    if not isinstance(name, str) or not name or not isinstance(args, dict):
        return None
    if names is not None and name not in names:
        return None
    return name, args


def _close_outside_strings(buf: str, start: int) -> int:
    """Where the first CLOSE from `start` on that is not inside a JSON string begins, or -1."""
    in_string = escaped = False
    for i in range(start, len(buf)):
        ch = buf[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "<" and buf.startswith(CLOSE, i):
            return i
    return -1


def _partial_open(buf: str) -> int:
    """Length of the longest end of `buf` that `<tool_call>` starts with."""
    for k in range(min(len(OPEN) - 1, len(buf)), 0, -1):
        if OPEN.startswith(buf[-k:]):
            return k
    return 0


def _text(out: list[Piece], text: str) -> None:
    if text:
        out.append(Text(text))
