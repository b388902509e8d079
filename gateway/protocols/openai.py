"""OpenAI: /v1/chat/completions, /v1/completions, /v1/models (see API-NOTES.md, OpenAI).

Each HTTP request becomes one `Generate` per choice (`n`, and each prompt of a legacy
completion); their events become one JSON answer or one SSE stream of chunks.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass

from aiohttp import web

from wire.messages.scheduler import Done, Embed, Generate, Tokens

from ..embeddings import INPUT_SCHEMA, as_base64, as_floats, read_input
from ..errors import BadRequest, GatewayError
from ..fields import Fields, text_of
from ..formats import OPENAI_SCHEMA, openai_format
from ..generation import Result, admitted, collect_all, merged
from ..toolcalls import Text, ToolCall, parse
from ..tools import Tools, call_id, openai_tools, past_calls
from ..model import ModelCard
from ..params import Body, Param
from ..stream import SseTemplate, json_response, open_stream, sse
from .base import Protocol, error_headers

MAX_N = 16
ROLES = {"system", "developer", "user", "assistant", "tool"}
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 408: "timeout_error", 413: "invalid_request_error",
          429: "rate_limit_error", 503: "service_unavailable_error"}


@dataclass
class Job:
    """The choices of one HTTP request: a Generate per choice, and how to report them."""
    generates: list[Generate]
    stream: bool
    include_usage: bool
    logprobs: bool          # chat: report content logprobs; legacy: the `logprobs` count > 0
    n: int                  # choices per prompt
    tools: Tools | None = None
    echoes: list[str] | None = None   # legacy `echo`: each choice's prompt text, sent first


def finish_reason(res: Result) -> str:
    # A repeated-line loop and a cancel both ended the text early, as a stop does.
    return "length" if res.length_limited else "stop"


def sampling(v: dict, prompt: dict) -> list[Generate]:
    """One Generate per choice from a body's fields read by its table (chat and legacy alike)."""
    max_tokens = v.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = v["max_tokens"]
    common = {k: v[k] for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                "presence_penalty", "frequency_penalty", "stop")}
    # Choices of one request differ by seed; a given seed makes the whole set reproducible.
    seed = v["seed"]
    return [Generate(**prompt, **common, max_tokens=max_tokens,
                     seed=None if seed is None else (seed + i) % 2 ** 64) for i in range(v["n"])]


def chat_messages(f: Fields) -> list[dict]:
    out = []
    for i, m in enumerate(f.list("messages", required=True, min_len=1)):
        mf = Fields(m, prefix=f"messages[{i}].")
        role = mf.str("role", required=True)
        if role not in ROLES:
            raise BadRequest(f"messages[{i}].role is {role!r}; expected one of "
                             f"{', '.join(sorted(ROLES))}", param=f"messages[{i}].role")
        content = m.get("content")
        text = "" if content is None else text_of(content, f"messages[{i}].content")
        # Newer clients send "developer" for what chat templates know as "system".
        turn = {"role": "system" if role == "developer" else role, "content": text}
        if role == "assistant" and m.get("tool_calls"):
            turn["tool_calls"] = past_calls(m["tool_calls"], f"messages[{i}].tool_calls")
        if role == "tool":
            turn["tool_call_id"] = mf.str("tool_call_id", "")
        out.append(turn)
    return out


def tool_message(text: str, calls: list[ToolCall]) -> dict:
    """The assistant's message: its text, and its tool calls if it made any."""
    if not calls:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": text.strip() or None,
            "tool_calls": [_call(c) for c in calls]}


def _call(c: ToolCall, index: int | None = None) -> dict:
    out = {"id": call_id(), "type": "function",
           "function": {"name": c.name, "arguments": c.arguments_json}}
    return out if index is None else {"index": index, **out}


_MESSAGES = {"type": "array", "minItems": 1, "items": {
    "type": "object", "required": ["role"], "properties": {
        "role": {"enum": sorted(ROLES)}, "content": {"type": ["string", "array", "null"]}}}}
_FUNCTION_NAME = {"type": "object", "required": ["name"],
                  "properties": {"name": {"type": "string", "minLength": 1}}}
TOOLS_SCHEMA = {"type": "array", "items": {
    "type": "object", "required": ["type", "function"], "properties": {
        "type": {"const": "function"},
        "function": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "minLength": 1}, "description": {"type": "string"},
            "parameters": {"type": "object"}, "strict": {"type": ["boolean", "null"]}}}}}}
_TOOL_CHOICE = {"anyOf": [{"enum": ["none", "auto", "required"]},
                          {"type": "object", "required": ["type", "function"],
                           "properties": {"type": {"const": "function"},
                                          "function": _FUNCTION_NAME}}]}
_PROMPT = {"anyOf": [{"type": "string"},
                     {"type": "array", "minItems": 1, "items": {"type": "string"}},
                     {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}]}

# The fields of each request body, declared once: read with their checks, and described in
# /openapi.json.
SAMPLING = Body(
    model=Param.str(required=True), max_tokens=Param.int(lo=1),
    temperature=Param.num(1.0, lo=0.0, hi=2.0), top_p=Param.num(1.0, lo=0.0, hi=1.0),
    top_k=Param.int(0, lo=0), min_p=Param.num(0.0, lo=0.0, hi=1.0),
    repetition_penalty=Param.num(1.0, lo=0.0),
    presence_penalty=Param.num(0.0, lo=-2.0, hi=2.0),
    frequency_penalty=Param.num(0.0, lo=-2.0, hi=2.0),
    seed=Param.int(lo=-(2 ** 63), hi=2 ** 64 - 1), n=Param.int(1, lo=1, hi=MAX_N),
    stream=Param.bool(), response_format=Param.raw(OPENAI_SCHEMA),
    stream_options=Param.obj({"properties": {"include_usage": {"type": "boolean"}}}))
CHAT = SAMPLING.extend(
    messages=Param.raw(_MESSAGES, required=True), stop=Param.stops(limit=4),
    max_completion_tokens=Param.int(lo=1), logprobs=Param.bool(),
    top_logprobs=Param.int(0, lo=0, hi=20), tools=Param.raw(TOOLS_SCHEMA),
    tool_choice=Param.raw(_TOOL_CHOICE))
COMPLETIONS = SAMPLING.extend(prompt=Param.raw(_PROMPT, required=True), stop=Param.stops(),
                              logprobs=Param.int(0, lo=0, hi=5), echo=Param.bool())

# dimensions: the first n components, normalized again (Matryoshka); more than the model's width
# is a 400 (bad_dimensions).
EMBEDDINGS = Body(model=Param.str(required=True), input=Param.raw(INPUT_SCHEMA, required=True),
                  encoding_format=Param.str("float", schema={"enum": ["float", "base64"]}),
                  dimensions=Param.int(lo=1), user=Param.str())


class OpenAI(Protocol):
    name = "openai"
    requests = {"/v1/chat/completions": CHAT.schema(), "/v1/completions": COMPLETIONS.schema(),
                "/v1/embeddings": EMBEDDINGS.schema()}
    error_schema = {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"]}}}

    def routes(self):
        return [("POST", "/v1/chat/completions", self.chat),
                ("POST", "/v1/completions", self.completions),
                ("POST", "/v1/embeddings", self.embeddings),
                ("GET", "/v1/models", self.models),
                ("GET", "/v1/models/{id}", self.model)]

    # ------------------------------------------------------------------ errors
    def error(self, err: GatewayError) -> web.Response:
        return json_response(self._error_body(err), err.status, error_headers(err))

    def stream_error(self, err: GatewayError) -> bytes:
        return sse(self._error_body(err)) + sse("[DONE]")

    def _error_body(self, err: GatewayError) -> dict:
        return {"error": {"message": err.message, "type": _TYPES.get(err.status, "server_error"),
                          "param": err.param, "code": err.kind}}

    # ------------------------------------------------------------------ models
    def _model_object(self, card: ModelCard) -> dict:
        # `capabilities` (ours): a base model has no "chat" and answers only /v1/completions.
        return {"id": card.id, "object": "model", "created": card.created, "owned_by": "llmbus",
                "capabilities": card.capabilities, "aliases": list(card.aliases)}

    async def models(self, request: web.Request) -> web.Response:
        return json_response({"object": "list", "data": [self._model_object(self.backend.model())]})

    async def model(self, request: web.Request) -> web.Response:
        return json_response(self._model_object(self.backend.model(request.match_info["id"])))

    # ------------------------------------------------------------------ chat
    async def chat(self, request: web.Request) -> web.StreamResponse:
        f = await self.body(request)
        v = CHAT.read(f)
        card = self.backend.model(v["model"])
        if v["top_logprobs"] and not v["logprobs"]:
            raise BadRequest("top_logprobs needs logprobs: true", param="top_logprobs")
        tools = openai_tools(f)
        gens = sampling(v, {"messages": chat_messages(f), "top_logprobs": v["top_logprobs"],
                            "format": openai_format(f)})
        gens = [tools.offered(g) if tools else g for g in gens]
        job = Job(gens, v["stream"], v["stream_options"].bool("include_usage"), v["logprobs"],
                  v["n"], tools)
        if job.stream:
            return await self._stream(request, card, job, chat=True)
        results = await collect_all([self.backend.generate(g) for g in gens])
        choices = []
        for i, r in enumerate(results):
            text, calls = (parse(tools.prefix + r.text, tools.names) if tools else (r.text, []))
            choices.append({"index": i, "message": tool_message(text, calls),
                            "logprobs": ({"content": self._chat_logprobs(card, r, 0)}
                                         if job.logprobs else None),
                            "finish_reason": "tool_calls" if calls else finish_reason(r)})
        return json_response({"id": _id("chatcmpl"), "object": "chat.completion",
                              "created": int(time.time()), "model": card.id, "choices": choices,
                              "usage": _usage(results, job.n)})

    # ------------------------------------------------------------------ embeddings
    async def embeddings(self, request: web.Request) -> web.Response:
        v = EMBEDDINGS.read(await self.body(request))
        card = self.backend.model(v["model"])
        if v["encoding_format"] not in ("float", "base64"):
            raise BadRequest(f"encoding_format is {v['encoding_format']!r}; expected float or "
                             f"base64", param="encoding_format")
        texts, ids = read_input(v["input"])
        got = await self.backend.embed(Embed(inputs=texts, input_ids=ids,
                                             dimensions=v["dimensions"]))
        encode = as_base64 if v["encoding_format"] == "base64" else as_floats
        tokens = sum(got.prompt_tokens)
        return json_response({"object": "list", "model": card.id, "data": [
            {"object": "embedding", "index": i, "embedding": encode(vec)}
            for i, vec in enumerate(got.vectors.array())],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    # ------------------------------------------------------------------ legacy completions
    async def completions(self, request: web.Request) -> web.StreamResponse:
        f = await self.body(request)
        v = COMPLETIONS.read(f)
        card = self.backend.model(v["model"])
        if v["echo"] and f.has("logprobs"):
            # Echoed logprobs are the prompt tokens' own, which the pipeline does not compute
            # (the last shard samples from the last position only): refused, not made up.
            raise BadRequest("echo with logprobs is not supported: the prompt tokens' "
                             "log-probabilities are not computed; ask echo or logprobs alone",
                             param="echo")
        gens, fmt, echoes = [], openai_format(f), []
        for prompt in _prompts(f):
            gens += sampling(v, {**prompt, "top_logprobs": v["logprobs"], "format": fmt})
            echoes += [await self._prompt_text(prompt) if v["echo"] else ""] * v["n"]
        if len(gens) > MAX_N:
            raise BadRequest(f"{len(gens)} completions asked (prompts x n); at most {MAX_N}",
                             param="n")
        job = Job(gens, v["stream"], v["stream_options"].bool("include_usage"),
                  f.has("logprobs"), v["n"], echoes=echoes)
        if job.stream:
            return await self._stream(request, card, job, chat=False)
        results = await collect_all([self.backend.generate(g) for g in gens])
        choices = [{"index": i, "text": echoes[i] + r.text,
                    "logprobs": self._legacy_logprobs(card, r, 0) if job.logprobs else None,
                    "finish_reason": finish_reason(r)} for i, r in enumerate(results)]
        return json_response({"id": _id("cmpl"), "object": "text_completion",
                              "created": int(time.time()), "model": card.id, "choices": choices,
                              "usage": _usage(results, job.n)})

    async def _prompt_text(self, prompt: dict) -> str:
        """A legacy prompt's text as `echo` returns it (token ids decoded by the tokenizer)."""
        if "prompt" in prompt:
            return prompt["prompt"]
        return await self.backend.detokenize(prompt["prompt_ids"])

    # ------------------------------------------------------------------ streams
    async def _stream(self, request: web.Request, card: ModelCard, job: Job,
                      chat: bool) -> web.StreamResponse:
        async with contextlib.aclosing(merged([self.backend.generate(g) for g in job.generates])) as events:
            results = [Result() for _ in job.generates]
            replay = await admitted(events, results)
            head = {"id": _id("chatcmpl" if chat else "cmpl"), "created": int(time.time()),
                    "model": card.id, "object": "chat.completion.chunk" if chat else "text_completion"}
            resp = await open_stream(request, "text/event-stream")
            if chat:
                for i in range(len(results)):
                    await resp.write(self._chunk(head, job, i, {"role": "assistant", "content": ""}))
            for i, echo in enumerate(job.echoes or []):
                if echo:
                    await resp.write(self._legacy_chunk(head, job, i, echo, None, None))
            parsers = [job.tools.stream() if job.tools else None for _ in results]
            # Plain text chunks, the bulk of a stream, from a template encoded once per choice.
            texts = [SseTemplate(json.loads(self._chunk(head, job, i, {"content": ""})[6:]),
                                 _put_content) for i in range(len(results))]
            called = [0] * len(results)     # tool calls sent per choice

            async def pieces(i: int, text: str, lp: dict | None, end: bool = False) -> None:
                """A choice's new text, as content and tool-call deltas (tools given)."""
                p = parsers[i]
                out = ([Text(text)] if p is None else p.feed(text)) + (p.finish() if end and p else [])
                content = "".join(x.text for x in out if isinstance(x, Text))
                if lp is not None:
                    await resp.write(self._chunk(head, job, i, {"content": content}, logprobs=lp))
                elif content:
                    await resp.write(texts[i](content))
                for c in out:
                    if isinstance(c, ToolCall):
                        await resp.write(self._chunk(head, job, i, {"tool_calls": [
                            _call(c, c.index)]}))
                        called[i] += 1

            async for i, ev in replay:
                r = results[i]
                if isinstance(ev, Tokens) and (ev.text or job.logprobs):
                    if chat:
                        lp = ({"content": self._chat_logprobs(card, r, len(r.token_ids) - len(ev.token_ids))}
                              if job.logprobs else None)
                        await pieces(i, ev.text, lp)
                    else:
                        lp = (self._legacy_logprobs(card, r, len(r.token_ids) - len(ev.token_ids))
                              if job.logprobs else None)
                        await resp.write(self._legacy_chunk(head, job, i, ev.text, None, lp))
                elif isinstance(ev, Done):
                    if chat:
                        if parsers[i] is not None:
                            await pieces(i, "", None, end=True)
                        await resp.write(self._chunk(head, job, i, {}, finish=(
                            "tool_calls" if called[i] else finish_reason(r))))
                    else:
                        await resp.write(self._legacy_chunk(head, job, i, "", finish_reason(r), None))
            if job.include_usage:
                await resp.write(sse({**head, "choices": [], "usage": _usage(results, job.n)}))
            await resp.write(sse("[DONE]"))
            await resp.write_eof()
            return resp

    def _chunk(self, head: dict, job: Job, i: int, delta: dict, finish: str | None = None,
               logprobs: dict | None = None) -> bytes:
        chunk = {**head, "choices": [{"index": i, "delta": delta, "logprobs": logprobs,
                                      "finish_reason": finish}]}
        if job.include_usage:
            chunk["usage"] = None
        return sse(chunk)

    def _legacy_chunk(self, head, job, i, text, finish, logprobs) -> bytes:
        chunk = {**head, "choices": [{"index": i, "text": text, "logprobs": logprobs,
                                      "finish_reason": finish}]}
        if job.include_usage:
            chunk["usage"] = None
        return sse(chunk)

    # ------------------------------------------------------------------ logprobs
    def _chat_logprobs(self, card: ModelCard, r: Result, start: int) -> list[dict]:
        out = []
        for k in range(start, len(r.token_ids)):
            tops = []
            if k < len(r.top_ids):
                tops = [_token_logprob(card, t, lp) for t, lp in zip(r.top_ids[k], r.top_logprobs[k])]
            out.append({**_token_logprob(card, r.token_ids[k], r.logprobs[k]), "top_logprobs": tops})
        return out

    def _legacy_logprobs(self, card: ModelCard, r: Result, start: int) -> dict:
        tokens = [_text(card.token(t)) for t in r.token_ids[start:]]
        offsets, at = [], len(r.text) - sum(len(t) for t in tokens) if start else 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        tops = [{_text(card.token(t)): lp for t, lp in zip(r.top_ids[k], r.top_logprobs[k])}
                for k in range(start, min(len(r.top_ids), len(r.token_ids)))]
        return {"tokens": tokens, "token_logprobs": r.logprobs[start:],
                "top_logprobs": tops or None, "text_offset": offsets}


def _put_content(chunk: dict, text: str) -> None:
    chunk["choices"][0]["delta"]["content"] = text


def _prompts(f: Fields) -> list[dict]:
    """`prompt`: a string, a list of strings, a list of token ids, or a list of such lists."""
    p = f.body.get("prompt")
    if isinstance(p, str):
        return [{"prompt": p}]
    if isinstance(p, list) and p:
        if all(isinstance(x, str) for x in p):
            return [{"prompt": x} for x in p]
        if all(isinstance(x, int) and not isinstance(x, bool) for x in p):
            return [{"prompt_ids": list(p)}]
        if all(isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool)
                                                  for t in x) for x in p):
            return [{"prompt_ids": list(x)} for x in p]
    raise BadRequest("prompt must be a string, a list of strings, or token ids", param="prompt")


def _token_logprob(card: ModelCard, token_id: int, logprob: float) -> dict:
    raw = card.token(token_id)
    return {"token": _text(raw), "logprob": float(logprob), "bytes": list(raw)}


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _usage(results: list[Result], n: int) -> dict:
    # The n choices of one prompt share it: count each prompt once, as OpenAI does.
    prompt = sum(r.prompt_tokens for r in results[::n])
    completion = sum(r.completion_tokens for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"
