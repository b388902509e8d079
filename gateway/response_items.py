"""The output of one OpenAI Responses answer, built from its text and tool calls as they come
(pure: no I/O): the output items (`message` with one `output_text` part, `function_call`), and
the stream events that tell them, in the order the official client's stream reader expects:

    response.output_item.added, response.content_part.added, response.output_text.delta...,
    response.output_text.done, response.content_part.done, response.output_item.done
    (a call: output_item.added, function_call_arguments.delta/.done, output_item.done)

The events' `sequence_number` and the response's own events (created, in_progress, completed)
are the protocol's: it numbers every event it writes.
"""

from __future__ import annotations

import uuid
from typing import Any

from .toolcalls import Text, ToolCall
from .tools import call_id

Event = dict[str, Any]


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class ResponseItems:
    """Feed pieces (Text, ToolCall); get the events they make. `items` is the output so far."""

    def __init__(self, parallel_tool_calls: bool = True):
        self.items: list[dict[str, Any]] = []
        self.parallel_tool_calls = parallel_tool_calls
        self._open: dict[str, Any] | None = None     # the message item text goes into
        # Blank text with no message open (the newline before a call) waits: it starts a
        # message only if words follow, never an item of its own.
        self._blank = ""

    @property
    def calls(self) -> int:
        return sum(1 for it in self.items if it["type"] == "function_call")

    def feed(self, pieces: list) -> list[Event]:
        out: list[Event] = []
        for p in pieces:
            if isinstance(p, Text):
                out += self._text(p.text)
            elif isinstance(p, ToolCall) and (self.parallel_tool_calls or not self.calls):
                out += self._call(p)
            elif isinstance(p, ToolCall):
                # parallel_tool_calls false: one call per answer; a further one stays text.
                out += self._text(f"<tool_call>\n{{\"name\": \"{p.name}\", \"arguments\": "
                                  f"{p.arguments_json}}}\n</tool_call>")
        return out

    def finish(self) -> list[Event]:
        """Close the open message. An answer with no item gets one message holding its text,
        even blank or empty; blank text after a call is dropped."""
        text, self._blank = self._blank, ""
        if self.items:
            return self._close()
        out = self._open_message()
        if text:
            self._open["content"][0]["text"] = text
            out.append(self._delta(text))
        return out + self._close()

    # ------------------------------------------------------------------ messages
    def _text(self, text: str) -> list[Event]:
        if self._open is None:
            text, self._blank = self._blank + text, ""
            if not text.strip():
                self._blank = text
                return []
        out = self._open_message() if self._open is None else []
        self._open["content"][0]["text"] += text
        return out + [self._delta(text)]

    def _delta(self, text: str) -> Event:
        return {"type": "response.output_text.delta", **self._where(), "content_index": 0,
                "delta": text, "logprobs": []}

    def _open_message(self) -> list[Event]:
        self._open = {"id": item_id("msg"), "type": "message", "role": "assistant",
                      "status": "in_progress", "content": []}
        self.items.append(self._open)
        added = {"type": "response.output_item.added", "output_index": len(self.items) - 1,
                 "item": _copy(self._open)}
        self._open["content"].append(_part(""))
        return [added, {"type": "response.content_part.added", **self._where(), "content_index": 0,
                        "part": _part("")}]

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        part = self._open["content"][0]
        where = self._where()
        self._open["status"] = "completed"
        out = [{"type": "response.output_text.done", **where, "content_index": 0,
                "text": part["text"], "logprobs": []},
               {"type": "response.content_part.done", **where, "content_index": 0,
                "part": _copy(part)},
               {"type": "response.output_item.done", "output_index": where["output_index"],
                "item": _copy(self._open)}]
        self._open = None
        return out

    def _where(self) -> dict[str, Any]:
        return {"item_id": self._open["id"], "output_index": self.items.index(self._open)}

    # ------------------------------------------------------------------ function calls
    def _call(self, c: ToolCall) -> list[Event]:
        out, self._blank = self._close(), ""
        item = {"id": item_id("fc"), "type": "function_call", "call_id": call_id(),
                "name": c.name, "arguments": c.arguments_json, "status": "completed"}
        self.items.append(item)
        where = {"item_id": item["id"], "output_index": len(self.items) - 1}
        return out + [
            {"type": "response.output_item.added", "output_index": where["output_index"],
             "item": {**item, "arguments": "", "status": "in_progress"}},
            {"type": "response.function_call_arguments.delta", **where, "delta": item["arguments"]},
            {"type": "response.function_call_arguments.done", **where, "name": c.name,
             "arguments": item["arguments"]},
            {"type": "response.output_item.done", "output_index": where["output_index"],
             "item": dict(item)}]


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    """A snapshot for an event (the item goes on changing after it is sent)."""
    return {k: ([_copy(x) if isinstance(x, dict) else x for x in v] if isinstance(v, list)
                else v) for k, v in obj.items()}


def output_text(items: list[dict[str, Any]]) -> str:
    return "".join(c["text"] for it in items if it["type"] == "message" for c in it["content"])
