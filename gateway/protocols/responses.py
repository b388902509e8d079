"""OpenAI's Responses API: `POST /v1/responses` (one JSON response, or an SSE stream of typed
events; see API-NOTES.md, OpenAI Responses).

The input (a string, or a list of messages, past function calls and their outputs) becomes one
chat; the answer's text and tool calls become output items (gateway/response_items.py). This
server keeps no responses: `previous_response_id`, `store: true`, `background` and
`conversation` are refused by name (send the whole conversation as `input`), never ignored.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from aiohttp import web

from wire.messages.scheduler import Done, Generate, Tokens

from ..errors import BadRequest, GatewayError
from ..fields import Fields
from ..formats import RESPONSES_TEXT_SCHEMA, responses_format
from ..generation import Result, admitted, collect, merged
from ..model import ModelCard
from ..params import Body, Param
from ..response_items import ResponseItems, item_id
from ..stream import open_stream, sse, json_response
from ..toolcalls import Text
from ..tools import Tools, call_arguments, call_id, responses_tools
from .openai import OpenAI

ROLES = {"user", "assistant", "system", "developer"}
# Content parts a turn may hold: the user's input text, and an earlier answer's text.
_TEXT_PARTS = {"input_text", "output_text", "text", "refusal"}

_INPUT = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object", "properties": {
    "type": {"enum": ["message", "function_call", "function_call_output"]},
    "role": {"enum": sorted(ROLES)}, "content": {"type": ["string", "array"]},
    "call_id": {"type": "string"}, "name": {"type": "string"},
    "arguments": {"type": "string"}, "output": {"type": "string"}}}}]}
_TOOLS = {"type": "array", "items": {"type": "object", "required": ["type", "name"], "properties": {
    "type": {"const": "function"}, "name": {"type": "string", "minLength": 1},
    "description": {"type": "string"}, "parameters": {"type": "object"},
    "strict": {"type": ["boolean", "null"]}}}}
_TOOL_CHOICE = {"anyOf": [{"enum": ["none", "auto", "required"]},
                          {"type": "object", "required": ["type", "name"], "properties": {
                              "type": {"const": "function"}, "name": {"type": "string"}}}]}

# The request's fields, declared once: read with their checks, and described in /openapi.json.
# The ones this server cannot honour are declared too, so that they are refused by name.
RESPONSES = Body(
    model=Param.str(required=True), input=Param.raw(_INPUT, required=True),
    instructions=Param.str(), max_output_tokens=Param.int(lo=1),
    temperature=Param.num(1.0, lo=0.0, hi=2.0), top_p=Param.num(1.0, lo=0.0, hi=1.0),
    stream=Param.bool(), tools=Param.raw(_TOOLS), tool_choice=Param.raw(_TOOL_CHOICE),
    parallel_tool_calls=Param.bool(True), text=Param.obj(RESPONSES_TEXT_SCHEMA),
    metadata=Param.obj({"additionalProperties": {"type": "string"}}),
    store=Param.bool(False, schema={"const": False}),
    previous_response_id=Param.raw({"type": "null"}), background=Param.bool(False),
    user=Param.str())
_KEPT = "this server keeps no responses: send the whole conversation as `input`"


def turns(f: Fields, instructions: str | None) -> list[dict]:
    """`instructions` and `input` as one chat: messages as turns, a run of function_call items
    as one assistant turn's tool_calls, a function_call_output as a `tool` turn."""
    out: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
    raw = f.body.get("input")
    if isinstance(raw, str):
        return out + [{"role": "user", "content": raw}]
    items = f.list("input", required=True, min_len=1)
    for i, item in enumerate(items):
        it = Fields(item, prefix=f"input[{i}].")
        kind = it.str("type", "message")
        if kind == "message":
            role = it.str("role", required=True)
            if role not in ROLES:
                raise BadRequest(f"input[{i}].role is {role!r}; expected one of "
                                 f"{', '.join(sorted(ROLES))}", param=f"input[{i}].role")
            out.append({"role": "system" if role == "developer" else role,
                        "content": _content(item.get("content"), f"input[{i}].content")})
        elif kind == "function_call":
            call = {"id": it.str("call_id") or call_id(), "type": "function", "function": {
                "name": it.str("name", required=True),
                "arguments": call_arguments(item.get("arguments"), f"input[{i}].arguments")}}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": it.str("call_id", required=True),
                        "content": output if isinstance(output, str)
                        else _content(output, f"input[{i}].output")})
        else:
            raise BadRequest(f"input[{i}].type is {kind!r}; supported: message, function_call, "
                             f"function_call_output", param=f"input[{i}].type")
    return out


def _content(content: Any, param: str) -> str:
    """A turn's content: a string, or text parts (input_text, or output_text of an answer)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{param} must be a string or a list of parts", param=param)
    texts = []
    for j, part in enumerate(content):
        pf = Fields(part, prefix=f"{param}[{j}].")
        kind = pf.str("type", required=True)
        if kind not in _TEXT_PARTS:
            raise BadRequest(f"{param}[{j}] is an {kind!r} part; only text is supported",
                             param=f"{param}[{j}].type")
        texts.append(pf.str("refusal" if kind == "refusal" else "text", required=True))
    return "".join(texts)


def _refuse_kept(v: dict, f: Fields) -> None:
    if v["previous_response_id"] is not None:
        raise BadRequest(f"previous_response_id is not supported: {_KEPT}",
                         param="previous_response_id")
    if v["store"]:
        raise BadRequest(f"store: true is not supported: {_KEPT} (send store: false)",
                         param="store")
    if v["background"]:
        raise BadRequest("background: true is not supported: ask with stream: true instead",
                         param="background")
    for name in ("conversation", "prompt", "reasoning"):
        if f.has(name):
            raise BadRequest(f"{name} is not supported by this server", param=name)
    include = f.list("include") or []
    if include:
        raise BadRequest(f"include {include!r} is not supported", param="include")


class Responses(OpenAI):
    """OpenAI's protocol (its error shape) for the Responses endpoint."""
    name = "openai"
    requests = {"/v1/responses": RESPONSES.schema()}

    def routes(self):
        return [("POST", "/v1/responses", self.create)]

    def stream_error(self, err: GatewayError) -> bytes:
        # An error the stream's own handler did not number (_stream numbers those it meets).
        return sse({**self._error_event(err), "sequence_number": 0}, event="error")

    @staticmethod
    def _error_event(err: GatewayError) -> dict:
        return {"type": "error", "code": err.kind, "message": err.message, "param": err.param}

    async def create(self, request: web.Request) -> web.StreamResponse:
        f = await self.body(request)
        v = RESPONSES.read(f)
        _refuse_kept(v, f)
        card = self.backend.model(v["model"])
        tools = responses_tools(f)
        gen = Generate(messages=turns(f, v["instructions"]), max_tokens=v["max_output_tokens"],
                       temperature=v["temperature"], top_p=v["top_p"], format=responses_format(f))
        gen = tools.offered(gen) if tools else gen
        head = self._head(card, v, f)
        if v["stream"]:
            return await self._stream(request, head, gen, tools, v["parallel_tool_calls"])
        r = await collect(self.backend.generate(gen))
        items = ResponseItems(v["parallel_tool_calls"])
        items.feed(_pieces(tools, r.text))
        items.finish()
        return json_response(_ended(head, items, r))

    def _head(self, card: ModelCard, v: dict, f: Fields) -> dict:
        """The response object before any output: what was asked, as the answer echoes it."""
        choice = f.body.get("tool_choice") or "auto"
        if isinstance(choice, dict):
            choice = {"type": "function", "name": choice.get("name")}
        tools = [{"type": "function", "name": t["name"], "description": t.get("description"),
                  "parameters": t.get("parameters"), "strict": t.get("strict")}
                 for t in f.list("tools") or []]
        fmt = f.obj("text").body.get("format") or {"type": "text"}
        return {"id": item_id("resp"), "object": "response", "created_at": int(time.time()),
                "status": "in_progress", "error": None, "incomplete_details": None,
                "instructions": v["instructions"], "max_output_tokens": v["max_output_tokens"],
                "metadata": f.body.get("metadata") or {}, "model": card.id, "output": [],
                "parallel_tool_calls": v["parallel_tool_calls"], "previous_response_id": None,
                "store": False, "temperature": v["temperature"], "text": {"format": fmt},
                "tool_choice": choice, "tools": tools, "top_p": v["top_p"],
                "truncation": "disabled", "usage": None, "user": v["user"]}

    async def _stream(self, request: web.Request, head: dict, gen: Generate,
                      tools: Tools | None, parallel: bool) -> web.StreamResponse:
        async with contextlib.aclosing(merged([self.backend.generate(gen)])) as events:
            r = Result()
            replay = await admitted(events, [r])
            resp = await open_stream(request, "text/event-stream")
            seq = 0

            async def send(events: list[dict]) -> None:
                nonlocal seq
                for ev in events:
                    await resp.write(sse({**ev, "sequence_number": seq}, event=ev["type"]))
                    seq += 1

            await send([{"type": "response.created", "response": head},
                        {"type": "response.in_progress", "response": head}])
            items = ResponseItems(parallel)
            parser = tools.stream() if tools else None
            try:
                async for _, ev in replay:
                    if isinstance(ev, Tokens) and ev.text:
                        await send(items.feed([Text(ev.text)] if parser is None
                                              else parser.feed(ev.text)))
                    elif isinstance(ev, Done):
                        break
            except GatewayError as e:
                # The stream's last event, numbered in turn (the SDK yields it as an error event).
                await send([self._error_event(e)])
                await resp.write_eof()
                return resp
            await send(items.feed(parser.finish() if parser else []) + items.finish())
            end = _ended(head, items, r)
            await send([{"type": f"response.{end['status']}", "response": end}])
            await resp.write_eof()
            return resp


def _pieces(tools: Tools | None, text: str) -> list:
    """A whole answer's text and calls, in order (as the stream finds them)."""
    if tools is None:
        return [Text(text)]
    parser = tools.stream()
    return parser.feed(text) + parser.finish()


def _ended(head: dict, items: ResponseItems, r: Result) -> dict:
    cut = r.length_limited
    return {**head, "status": "incomplete" if cut else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "output": items.items,
            "usage": {"input_tokens": r.prompt_tokens,
                      "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                      "output_tokens": r.completion_tokens,
                      "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": r.prompt_tokens + r.completion_tokens}}
