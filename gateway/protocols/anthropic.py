"""Anthropic: /v1/messages (JSON or named SSE events) and /v1/messages/count_tokens."""

from __future__ import annotations

import contextlib
import uuid

from aiohttp import web

from wire.messages.scheduler import Done, Generate, Tokens

from ..errors import BadRequest, GatewayError
from ..fields import Fields, text_of
from ..formats import ANTHROPIC_SCHEMA, OUTPUT_CONFIG_SCHEMA, anthropic_format
from ..generation import Result, admitted, collect, merged
from ..toolcalls import Text, ToolCall, parse
from ..tools import anthropic_tools, anthropic_turn, call_id
from ..model import ModelCard
from ..params import Body, Param
from ..stream import json_response, open_stream, sse
from .base import Protocol, error_headers

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 408: "timeout_error", 413: "request_too_large",
          429: "rate_limit_error", 503: "overloaded_error", 504: "timeout_error"}


def stop_reason(r: Result, called: bool = False) -> str:
    if called:
        return "tool_use"
    if r.length_limited:
        return "max_tokens"
    return "stop_sequence" if r.stop_string is not None else "end_turn"


def chat(f: Fields) -> list[dict]:
    """`system` (a string or text blocks) and `messages` as one chat for the template."""
    out = []
    if f.has("system"):
        out.append({"role": "system", "content": text_of(f.body["system"], "system")})
    for i, m in enumerate(f.list("messages", required=True, min_len=1)):
        mf = Fields(m, prefix=f"messages[{i}].")
        role = mf.str("role", required=True)
        if role not in ("user", "assistant"):
            raise BadRequest(f"messages[{i}].role is {role!r}; expected user or assistant",
                             param=f"messages[{i}].role")
        if "content" not in m:
            raise BadRequest(f"messages[{i}].content is required", param=f"messages[{i}].content")
        out += anthropic_turn(role, m["content"], i)
    return out


_MESSAGES = {"type": "array", "minItems": 1, "items": {
    "type": "object", "required": ["role", "content"], "properties": {
        "role": {"enum": ["user", "assistant"]}, "content": {"type": ["string", "array"]}}}}


_TOOLS = {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "minLength": 1}, "description": {"type": "string"},
    "input_schema": {"type": "object"}}}}
_TOOL_CHOICE = {"type": "object", "required": ["type"], "properties": {
    "type": {"enum": ["auto", "any", "tool", "none"]}, "name": {"type": "string"}}}

# The fields of each request body, declared once: read with their checks, and described in
# /openapi.json.
COUNT_TOKENS = Body(model=Param.str(required=True), messages=Param.raw(_MESSAGES, required=True),
                    system=Param.raw({"type": ["string", "array"]}), tools=Param.raw(_TOOLS))
MESSAGES = COUNT_TOKENS.extend(
    max_tokens=Param.int(lo=1, required=True), stop_sequences=Param.stops(),
    temperature=Param.num(1.0, lo=0.0, hi=1.0), top_k=Param.int(0, lo=0),
    top_p=Param.num(1.0, lo=0.0, hi=1.0), stream=Param.bool(), tool_choice=Param.raw(_TOOL_CHOICE),
    output_config=Param.raw(OUTPUT_CONFIG_SCHEMA), output_format=Param.raw(ANTHROPIC_SCHEMA))


def tool_use(c: ToolCall) -> dict:
    return {"type": "tool_use", "id": call_id("toolu_"), "name": c.name, "input": c.arguments}


class Anthropic(Protocol):
    name = "anthropic"
    requests = {"/v1/messages": MESSAGES.schema(), "/v1/messages/count_tokens": COUNT_TOKENS.schema()}
    error_schema = {"type": "object", "required": ["type", "error"], "properties": {
        "type": {"const": "error"}, "error": {"type": "object", "required": ["type", "message"]}}}

    def routes(self):
        return [("POST", "/v1/messages", self.messages),
                ("POST", "/v1/messages/count_tokens", self.count_tokens)]

    def error(self, err: GatewayError) -> web.Response:
        return json_response(self._body(err), err.status, error_headers(err))

    def stream_error(self, err: GatewayError) -> bytes:
        return sse(self._body(err), event="error")

    def _body(self, err: GatewayError) -> dict:
        return {"type": "error", "error": {"type": _TYPES.get(err.status, "api_error"),
                                           "message": err.message}}

    async def count_tokens(self, request: web.Request) -> web.Response:
        f = await self.body(request)
        self.backend.model(COUNT_TOKENS.read(f)["model"])
        return json_response({"input_tokens": len(await self.backend.render(
            chat(f), anthropic_tools(f)))})

    async def messages(self, request: web.Request) -> web.StreamResponse:
        f = await self.body(request)
        v = MESSAGES.read(f)
        card = self.backend.model(v["model"])
        gen = Generate(messages=chat(f), max_tokens=v["max_tokens"], temperature=v["temperature"],
                       top_k=v["top_k"], top_p=v["top_p"], stop=v["stop_sequences"],
                       format=anthropic_format(f))
        tools = anthropic_tools(f)
        gen = tools.offered(gen) if tools else gen
        msg_id = f"msg_{uuid.uuid4().hex[:24]}"
        if v["stream"]:
            return await self._stream(request, card, gen, msg_id, tools)
        r = await collect(self.backend.generate(gen))
        text, calls = parse(tools.prefix + r.text, tools.names) if tools else (r.text, [])
        content = [{"type": "text", "text": text}] if text.strip() or not calls else []
        return json_response({**self._message(card, msg_id, r, bool(calls)),
                              "content": content + [tool_use(c) for c in calls]})

    def _message(self, card: ModelCard, msg_id: str, r: Result, called: bool = False) -> dict:
        done = r.done
        return {"id": msg_id, "type": "message", "role": "assistant", "model": card.id,
                "content": [], "stop_reason": stop_reason(r, called) if done else None,
                "stop_sequence": r.stop_string if done else None,
                "usage": {"input_tokens": r.prompt_tokens, "output_tokens": r.completion_tokens}}

    async def _stream(self, request, card: ModelCard, gen: Generate, msg_id: str, tools=None):
        async with contextlib.aclosing(merged([self.backend.generate(gen)])) as events:
            r = Result()
            replay = await admitted(events, [r])
            resp = await open_stream(request, "text/event-stream")

            async def send(event: str, data: dict) -> None:
                # Every event needs its `event:` line equal to its type, or the SDK drops it.
                await resp.write(sse({"type": event, **data}, event=event))

            await send("message_start", {"message": self._message(card, msg_id, Result(
                prompt_tokens=r.prompt_tokens))})
            parser = tools.stream() if tools else None
            blocks = {"next": 0, "text": None, "calls": 0}   # index of the open text block

            async def text(t: str) -> None:
                if blocks["text"] is None:
                    blocks["text"], blocks["next"] = blocks["next"], blocks["next"] + 1
                    await send("content_block_start", {"index": blocks["text"], "content_block": {
                        "type": "text", "text": ""}})
                if t:
                    await send("content_block_delta", {"index": blocks["text"], "delta": {
                        "type": "text_delta", "text": t}})

            async def close_text() -> None:
                if blocks["text"] is not None:
                    await send("content_block_stop", {"index": blocks["text"]})
                    blocks["text"] = None

            async def pieces(out) -> None:
                for p in out:
                    if isinstance(p, Text):
                        await text(p.text)
                    else:   # a whole call: its block starts, gets its input, and stops at once
                        await close_text()
                        k = blocks["next"]
                        blocks["next"] += 1
                        blocks["calls"] += 1
                        await send("content_block_start", {"index": k, "content_block": {
                            **tool_use(p), "input": {}}})
                        await send("content_block_delta", {"index": k, "delta": {
                            "type": "input_json_delta", "partial_json": p.arguments_json}})
                        await send("content_block_stop", {"index": k})

            if parser is None:
                await text("")     # without tools the one text block opens at once
            await send("ping", {})
            async for _, ev in replay:
                if isinstance(ev, Tokens) and ev.text:
                    await pieces([Text(ev.text)] if parser is None else parser.feed(ev.text))
                elif isinstance(ev, Done):
                    break
            if parser is not None:
                await pieces(parser.finish())
            if blocks["next"] == 0:
                await text("")
            await close_text()
            await send("message_delta", {
                "delta": {"stop_reason": stop_reason(r, blocks["calls"] > 0),
                          "stop_sequence": r.stop_string},
                "usage": {"output_tokens": r.completion_tokens}})
            await send("message_stop", {})
            await resp.write_eof()
            return resp
