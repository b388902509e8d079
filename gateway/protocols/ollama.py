"""Ollama: /api/chat and /api/generate (NDJSON streams or one object), /api/tags, /api/show,
/api/version, /api/ps, /api/pull (into this machine's cache, as `llmbus pull`). (`GET /`,
"Ollama is running" unless a browser asks: protocols/web.py.)"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime, timezone

from aiohttp import web

from wire.messages.scheduler import Embed, Generate, Tokens

from ..embeddings import TEXTS_SCHEMA, as_floats, read_input
from ..errors import BadRequest, GatewayError, NotFound
from ..fields import Fields, text_of
from ..formats import OLLAMA_SCHEMA, ollama_format
from ..generation import Result, admitted, merged
from ..toolcalls import Text, ToolCall, parse
from ..tools import Tools, openai_tools, past_calls
from ..model import ModelCard
from ..params import Body, Param
from ..pulls import progress_lines, spec_of
from ..stream import json_response, ndjson, open_stream
from .base import Protocol, error_headers
from .openai import TOOLS_SCHEMA

# The Ollama API level these endpoints follow (clients compare it to enable features).
API_VERSION = "0.6.2"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def sampling(f: Fields) -> dict:
    """Generate's sampling fields from Ollama's `options`."""
    o = OPTIONS.read(f.obj("options"))
    n = o["num_predict"]
    if n == 0:
        raise BadRequest("options.num_predict must be -1 (no limit) or at least 1",
                         param="options.num_predict")
    return dict(max_tokens=None if n is None or n < 0 else n,   # -1 (and Ollama's -2: fill the context)
                temperature=o["temperature"], top_k=o["top_k"], top_p=o["top_p"], min_p=o["min_p"],
                repetition_penalty=o["repeat_penalty"], presence_penalty=o["presence_penalty"],
                frequency_penalty=o["frequency_penalty"], seed=o["seed"], stop=o["stop"])


# The fields of each request body (and of `options`), declared once: read with their checks,
# and described in /openapi.json.
OPTIONS = Body(
    num_predict=Param.int(), temperature=Param.num(0.8, lo=0.0, hi=2.0), top_k=Param.int(40, lo=0),
    top_p=Param.num(0.9, lo=0.0, hi=1.0), min_p=Param.num(0.0, lo=0.0, hi=1.0),
    repeat_penalty=Param.num(1.0, lo=0.0), presence_penalty=Param.num(0.0, lo=-2.0, hi=2.0),
    frequency_penalty=Param.num(0.0, lo=-2.0, hi=2.0), seed=Param.int(lo=-(2 ** 63), hi=2 ** 64 - 1),
    stop=Param.stops())
SHOW = Body(model=Param.str(required=True))
_GENERATING = SHOW.extend(stream=Param.bool(True), options=Param.obj(OPTIONS.schema()),
                          format=Param.raw(OLLAMA_SCHEMA))
CHAT = _GENERATING.extend(
    messages=Param.list({"items": {"type": "object", "required": ["role"]}}, required=True),
    tools=Param.raw(TOOLS_SCHEMA))
GENERATE = _GENERATING.extend(prompt=Param.str(""), system=Param.str(), raw=Param.bool())
# Older clients name the model `name`; `insecure` is accepted (nothing here is fetched over
# a registry that TLS would check: pip fetches the packages).
PULL = Body(model=Param.str(), name=Param.str(), insecure=Param.bool(), stream=Param.bool(True))
# /api/embed: normalized vectors, an input past the context cut to it unless truncate is false;
# /api/embeddings (the older call): one prompt, its vector as pooled, not normalized.
EMBED = SHOW.extend(input=Param.raw(TEXTS_SCHEMA, required=True), truncate=Param.bool(True),
                    dimensions=Param.int(lo=1), options=Param.obj(), keep_alive=Param.raw({}))
EMBEDDINGS = SHOW.extend(prompt=Param.str(required=True), options=Param.obj(),
                         keep_alive=Param.raw({}))


class Ollama(Protocol):
    name = "ollama"
    requests = {"/api/chat": CHAT.schema(), "/api/generate": GENERATE.schema(),
                "/api/show": SHOW.schema(), "/api/pull": PULL.schema(),
                "/api/embed": EMBED.schema(), "/api/embeddings": EMBEDDINGS.schema()}
    error_schema = {"type": "object", "required": ["error"],
                    "properties": {"error": {"type": "string"}}}

    def routes(self):
        return [("POST", "/api/chat", self.chat), ("POST", "/api/generate", self.generate),
                ("POST", "/api/embed", self.embed), ("POST", "/api/embeddings", self.embeddings),
                ("GET", "/api/tags", self.tags), ("POST", "/api/show", self.show),
                ("GET", "/api/version", self.version), ("GET", "/api/ps", self.ps),
                ("POST", "/api/pull", self.pull)]

    def error(self, err: GatewayError) -> web.Response:
        return json_response({"error": err.message}, err.status, error_headers(err))

    def stream_error(self, err: GatewayError) -> bytes:
        return ndjson({"error": err.message})

    def _card(self, name: str) -> ModelCard:
        card = self.backend.model()
        # Ollama names carry a tag; ours has one, "latest".
        if not card.matches(name.removesuffix(":latest")):
            raise NotFound(f"model {name!r} not found; this cluster serves {card.id!r}",
                           param="model")
        return card

    # ------------------------------------------------------------------ small endpoints
    async def version(self, request: web.Request) -> web.Response:
        return json_response({"version": API_VERSION})

    def _entry(self, card: ModelCard) -> dict:
        d = card.details
        return {"name": card.id, "model": card.id,
                "modified_at": datetime.fromtimestamp(card.created, timezone.utc).isoformat(),
                "size": int(d.get("file_bytes", 0) or 0), "digest": card.identity,
                "details": {"parent_model": "", "format": "gguf", "family": d.get("architecture", ""),
                            "families": [d.get("architecture", "")],
                            "parameter_size": d.get("size_label", ""),
                            "quantization_level": d.get("quantization", "")}}

    async def tags(self, request: web.Request) -> web.Response:
        return json_response({"models": [self._entry(self.backend.model())]})

    async def ps(self, request: web.Request) -> web.Response:
        card = self.backend.model()
        return json_response({"models": [{**self._entry(card), "expires_at": "0001-01-01T00:00:00Z",
                                          "size_vram": 0, "context_length": card.context_length}]})

    async def show(self, request: web.Request) -> web.Response:
        card = self._card(SHOW.read(await self.body(request))["model"])
        entry = self._entry(card)
        arch = card.details.get("architecture", "")
        return json_response({"modelfile": "", "parameters": "", "template": "",
                              "details": entry["details"], "modified_at": entry["modified_at"],
                              "model_info": {"general.architecture": arch,
                                             f"{arch}.context_length": card.context_length},
                              "capabilities": [c for c in card.capabilities if c != "chat"]})

    async def pull(self, request: web.Request) -> web.StreamResponse:
        """A model llmbus can pull, into this machine's cache: NDJSON progress lines (or the
        last one alone with stream: false), "success" at the end."""
        v = PULL.read(await self.body(request))
        name = v["model"] or v["name"]
        if not name:
            raise BadRequest("model is required", param="model")
        lines = progress_lines(spec_of(name))
        if not v["stream"]:
            async for line in lines:
                last = line
            return json_response(last)
        resp = await open_stream(request, "application/x-ndjson")
        async for line in lines:
            await resp.write(ndjson(line))
        await resp.write_eof()
        return resp

    # ------------------------------------------------------------------ embeddings
    async def embed(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        v = EMBED.read(await self.body(request))
        card = self._card(v["model"])
        texts, _ = read_input(v["input"], token_ids=False)
        got = await self.backend.embed(Embed(inputs=texts, truncate=v["truncate"],
                                             dimensions=v["dimensions"]))
        return json_response({"model": v["model"],
                              "embeddings": [as_floats(x) for x in got.vectors.array()],
                              "total_duration": int((time.perf_counter() - started) * 1e9),
                              "load_duration": 0, "prompt_eval_count": sum(got.prompt_tokens)})

    async def embeddings(self, request: web.Request) -> web.Response:
        v = EMBEDDINGS.read(await self.body(request))
        self._card(v["model"])
        texts, _ = read_input(v["prompt"], param="prompt", token_ids=False)
        got = await self.backend.embed(Embed(inputs=texts, normalize=False, truncate=True))
        return json_response({"embedding": as_floats(got.vectors.array()[0])})

    # ------------------------------------------------------------------ generation
    async def chat(self, request: web.Request) -> web.StreamResponse:
        f = await self.body(request)
        v = CHAT.read(f)
        card = self._card(v["model"])
        messages = []
        for i, m in enumerate(v["messages"]):
            mf = Fields(m, prefix=f"messages[{i}].")
            role = mf.str("role", required=True)
            if role not in ("system", "user", "assistant", "tool"):
                raise BadRequest(f"messages[{i}].role is {role!r}", param=f"messages[{i}].role")
            turn = {"role": role, "content": text_of(m.get("content") or "",
                                                     f"messages[{i}].content")}
            if role == "assistant" and m.get("tool_calls"):
                turn["tool_calls"] = past_calls(m["tool_calls"], f"messages[{i}].tool_calls")
            messages.append(turn)
        if not messages:      # Ollama's way to load a model: answer at once
            return json_response({"model": card.id, "created_at": _now(),
                                  "message": {"role": "assistant", "content": ""},
                                  "done": True, "done_reason": "load"})
        tools = openai_tools(f)     # Ollama has no tool_choice: the model decides
        if len(messages) > 1 and messages[-1]["role"] == "assistant" \
                and not messages[-1].get("tool_calls"):
            # As Ollama does, a last assistant message is continued, not answered: the reply
            # is the rest of it (a tool call it opened included).
            tools = Tools(tools.functions if tools else [], prefill=messages.pop()["content"])
        gen = Generate(messages=messages, format=ollama_format(f), **sampling(f))
        gen = tools.offered(gen) if tools else gen

        def piece(text: str, calls: list[ToolCall] = ()) -> dict:
            msg = {"role": "assistant", "content": text}
            if calls:   # arguments as an object, as Ollama sends them
                msg["tool_calls"] = [{"function": {"index": c.index, "name": c.name,
                                                   "arguments": c.arguments}} for c in calls]
            return {"message": msg}
        return await self._run(request, v["stream"], card, gen, piece, tools)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        f = await self.body(request)
        v = GENERATE.read(f)
        card = self._card(v["model"])
        prompt = v["prompt"]
        if not prompt:
            return json_response({"model": card.id, "created_at": _now(), "response": "",
                                  "done": True, "done_reason": "load"})
        if v["raw"] or not card.chat:
            # A base model has no template: its prompt goes as it is, as Ollama's does
            # (where a system prompt would have no place).
            if v["system"] and not v["raw"]:
                raise BadRequest("system needs a chat template, which this model (a base model) "
                                 "has none of: write it into the prompt", param="system")
            source = {"prompt": prompt}
        else:
            system = v["system"]
            source = {"messages": ([{"role": "system", "content": system}] if system else [])
                      + [{"role": "user", "content": prompt}]}
        return await self._run(request, v["stream"], card,
                               Generate(**source, format=ollama_format(f), **sampling(f)),
                               lambda text: {"response": text})

    async def _run(self, request, stream: bool, card: ModelCard, gen: Generate, piece, tools=None):
        # Ollama streams unless told not to (the tables' `stream` defaults to true).
        parser = tools.stream() if tools else None
        async with contextlib.aclosing(merged([self.backend.generate(gen)])) as events:
            r = Result()
            replay = await admitted(events, [r])
            resp = await open_stream(request, "application/x-ndjson") if stream else None

            async def write(out) -> None:
                text = "".join(p.text for p in out if isinstance(p, Text))
                calls = [p for p in out if isinstance(p, ToolCall)]
                if text or calls:
                    await resp.write(ndjson({"model": card.id, "created_at": _now(),
                                             **piece(text, *([calls] if calls else [])),
                                             "done": False}))
            async for _, ev in replay:
                if resp is not None and isinstance(ev, Tokens) and ev.text:
                    await write([Text(ev.text)] if parser is None else parser.feed(ev.text))
            if resp is not None and parser is not None:
                await write(parser.finish())
            if resp is None and parser is not None:
                text, calls = parse(tools.prefix + r.text, tools.names)
                # Without a call, the answer is what the model wrote (never the prefill again).
                end = piece(text, calls) if calls else piece(r.text if tools.prefill else text)
            else:
                end = piece("" if stream else r.text)
            last = {"model": card.id, "created_at": _now(), **end,
                    "done": True, "done_reason": "length" if r.length_limited else "stop",
                    **_durations(r)}
            if resp is None:
                return json_response(last)
            await resp.write(ndjson(last))
            await resp.write_eof()
            return resp


def _durations(r: Result) -> dict:
    """Ollama's counts and durations, in nanoseconds: prompt evaluation runs to the first
    token, evaluation from there to the end."""
    def ns(seconds: float) -> int:
        return max(0, int(seconds * 1e9))
    end = r.done_at or time.perf_counter()
    first = r.first_token_at or end
    return {"total_duration": ns(end - r.started_at), "load_duration": 0,
            "prompt_eval_count": r.prompt_tokens, "prompt_eval_duration": ns(first - r.started_at),
            "eval_count": r.completion_tokens, "eval_duration": ns(end - first)}
