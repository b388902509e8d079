"""Structured output through `llmbus up --shards 3`, with the real default model and the official
OpenAI, Anthropic and Ollama clients: every answer asked for in a JSON schema parses and
validates, streamed and not, and ends as a stop (never cut by max_tokens); `parse()` with a
pydantic model; forced tool calls name a listed tool with valid arguments, and so does every
call the model opens itself (tool_choice auto); an unsupported format is a 400 naming it. The masks are built in the scheduler and applied on the last of
three shards, so this is the whole path."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import anthropic
import jsonschema
import ollama
import openai
import pydantic
import pytest

from wire.messages.scheduler import StatsRequest

from .stack import Stack, call, wait_for
from .structured_cases import (AUTO_QUESTIONS, CASES, NO_TOOL_QUESTION, TOOL_QUESTIONS, TOOLS,
                               anthropic_history, openai_history)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MAX_TOKENS = 160
AT_ONCE = 24           # requests in flight at once: they share the pipeline's batches


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_path):
    s = Stack(tmp_path_factory.mktemp("runtime"), "--shards", "3", "--max-queue", "64",
              "--model", str(model_path))
    yield s
    s.close()


@pytest.fixture
def clients(stack):
    """The official async clients (each test has its own event loop, so its own clients)."""
    return (openai.AsyncOpenAI(base_url=stack.http + "/v1", api_key="unused", max_retries=0,
                               timeout=300),
            anthropic.AsyncAnthropic(base_url=stack.http, api_key="unused", max_retries=0,
                                     timeout=300),
            ollama.AsyncClient(host=stack.http, timeout=300))


def model_id(stack) -> str:
    return openai.OpenAI(base_url=stack.http + "/v1", api_key="unused").models.list().data[0].id


def chat(question: str) -> list[dict]:
    return [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": question}]


async def ask_openai(c, model, question, schema, stream, seed):
    kw = dict(model=model, messages=chat(question), max_tokens=MAX_TOKENS, seed=seed,
              temperature=0.0 if not stream else 0.8,
              response_format={"type": "json_schema", "json_schema": {
                  "name": "answer", "schema": schema, "strict": True}})
    if not stream:
        r = await c.chat.completions.create(**kw)
        return r.choices[0].message.content, r.choices[0].finish_reason
    text, finish = "", None
    async for chunk in await c.chat.completions.create(**kw, stream=True):
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    return text, finish


async def ask_anthropic(c, model, question, schema, stream, seed):
    # This SDK has no temperature argument (it goes in the body), and the API has no seed:
    # greedy, so that every run asks the same.
    kw = dict(model=model, system="Answer in JSON.", max_tokens=MAX_TOKENS,
              extra_body={"temperature": 0.0}, messages=[{"role": "user", "content": question}],
              output_config={"format": {"type": "json_schema", "schema": schema}})
    if not stream:
        r = await c.messages.create(**kw)
        return "".join(b.text for b in r.content if b.type == "text"), r.stop_reason
    text, finish = "", None
    async for ev in await c.messages.create(**kw, stream=True):
        if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
            text += ev.delta.text
        elif ev.type == "message_delta":
            finish = ev.delta.stop_reason
    return text, finish


async def ask_ollama(c, model, question, schema, stream, seed):
    kw = dict(model=model, messages=chat(question), format=schema,
              options={"num_predict": MAX_TOKENS, "seed": seed, "temperature": 0.6})
    if not stream:
        r = await c.chat(**kw)
        return r.message.content, r.done_reason
    text, finish = "", None
    async for part in await c.chat(**kw, stream=True):
        text += part.message.content or ""
        finish = part.done_reason or finish
    return text, finish


# What each protocol calls an answer that ended by itself.
ASK = {"openai": (ask_openai, "stop"), "anthropic": (ask_anthropic, "end_turn"),
       "ollama": (ask_ollama, "stop")}


async def idle(stack) -> dict | None:
    s = (await call(stack.endpoint, StatsRequest())).stats
    return s if s["running"] == 0 and s["waiting"] == 0 and s["pages_used"] == 0 else None


async def test_every_schema_parses_and_validates_in_every_protocol(stack, clients):
    assert len(CASES) >= 20
    model = model_id(stack)
    gate = asyncio.Semaphore(AT_ONCE)
    byname = dict(zip(ASK, clients))

    async def one(case, proto, stream, seed):
        name, question, schema = case
        ask, ended = ASK[proto]
        async with gate:
            text, finish = await ask(byname[proto], model, question, schema, stream, seed)
        where = f"{name} via {proto}{' streamed' if stream else ''}: {text!r} ({finish})"
        try:
            jsonschema.validate(json.loads(text), schema)
        except (ValueError, jsonschema.ValidationError) as e:
            return f"{where}: {str(e).splitlines()[0]}"
        return None if finish == ended else f"{where}: ended {finish}, not {ended}"

    runs = [one(case, proto, stream, seed)
            for seed, case in enumerate(CASES) for proto in ASK for stream in (False, True)]
    failures = [f for f in await asyncio.gather(*runs) if f]
    assert not failures, f"{len(failures)} of {len(runs)} answers failed:\n" + "\n".join(failures)
    stats = (await call(stack.endpoint, StatsRequest())).stats
    assert stats["grammar_masks"] > 0 and stats["grammar_mask_us_p50"] > 0
    assert await wait_for(lambda: idle(stack), timeout=30)


class Weather(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=30)
    temperature_c: int = pydantic.Field(ge=-60, le=60)
    sunny: bool


async def test_openai_parse_returns_the_pydantic_object(stack, clients):
    oai = clients[0]
    r = await oai.chat.completions.parse(
        model=model_id(stack), response_format=Weather, temperature=0.0, max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": "What is the weather like in Rome in July?"}])
    got = r.choices[0].message.parsed
    assert isinstance(got, Weather) and r.choices[0].finish_reason == "stop", r


async def test_json_object_and_legacy_completions(stack, clients):
    oai, _, oll = clients
    model = model_id(stack)
    r = await oai.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What is the capital of Japan?"}],
        response_format={"type": "json_object"}, temperature=0.0, max_tokens=MAX_TOKENS)
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    assert r.choices[0].finish_reason == "stop"
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}},
              "required": ["answer"], "additionalProperties": False}
    r = await oai.completions.create(
        model=model, prompt="Question: what is 6 times 7? Answer as JSON: ", temperature=0.0,
        max_tokens=MAX_TOKENS, extra_body={"response_format": {
            "type": "json_schema", "json_schema": {"name": "a", "schema": schema}}})
    jsonschema.validate(json.loads(r.choices[0].text), schema)
    assert r.choices[0].finish_reason == "stop"
    g = await oll.generate(model=model, prompt="Name a colour.", format="json",
                           options={"num_predict": MAX_TOKENS, "temperature": 0.0})
    assert isinstance(json.loads(g.response), dict) and g.done_reason == "stop"


def valid_call(name: str, args: dict, allowed: list[str]) -> str | None:
    """Why a call is not a valid one of the `allowed` tools, or None."""
    if name not in allowed:
        return f"{name!r} is not among {allowed}"
    schema = next(t["parameters"] for t in TOOLS if t["name"] == name)
    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError as e:
        return f"{name}({args}): {e.message}"
    return None


async def openai_call(oai, model, question, choice, stream):
    """The calls of the answer, and how it ended (its finish reason and text, for a failure)."""
    kw = dict(model=model, messages=[{"role": "user", "content": question}], temperature=0.7,
              seed=len(question), max_tokens=MAX_TOKENS, tool_choice=choice,
              tools=[{"type": "function", "function": t} for t in TOOLS])
    if not stream:
        r = await oai.chat.completions.create(**kw)
        calls = r.choices[0].message.tool_calls or []
        return ([(c.function.name, json.loads(c.function.arguments)) for c in calls],
                f"openai {choice}: {r.choices[0].finish_reason}, text {r.choices[0].message.content!r}")
    calls, text, finish = [], "", None
    async for chunk in await oai.chat.completions.create(**kw, stream=True):
        for ch in chunk.choices:
            for c in ch.delta.tool_calls or []:
                calls.append((c.function.name, json.loads(c.function.arguments)))
            text, finish = text + (ch.delta.content or ""), ch.finish_reason or finish
    return calls, f"openai {choice} streamed: {finish}, text {text!r}"


async def anthropic_call(ant, model, question, choice, stream):
    """The calls of the answer, and how it ended (its stop reason and text, for a failure)."""
    kw = dict(model=model, messages=[{"role": "user", "content": question}],
              extra_body={"temperature": 0.7}, max_tokens=MAX_TOKENS, tool_choice=choice,
              tools=[{"name": t["name"], "description": t["description"],
                      "input_schema": t["parameters"]} for t in TOOLS])
    if not stream:
        r = await ant.messages.create(**kw)
        return ([(b.name, b.input) for b in r.content if b.type == "tool_use"],
                f"anthropic {choice}: {r.stop_reason}, text {[b.text for b in r.content if b.type == 'text']!r}")
    calls, current, parts, text, stop = [], None, "", "", None
    async for ev in await ant.messages.create(**kw, stream=True):
        if ev.type == "content_block_start" and ev.content_block.type == "tool_use":
            current, parts = ev.content_block.name, ""
        elif ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
            parts += ev.delta.partial_json
        elif ev.type == "content_block_delta" and ev.delta.type == "text_delta":
            text += ev.delta.text
        elif ev.type == "content_block_stop" and current is not None:
            calls.append((current, json.loads(parts)))
            current = None
        elif ev.type == "message_delta":
            stop = ev.delta.stop_reason
    return calls, f"anthropic {choice} streamed: {stop}, text {text!r}"


async def test_forced_tool_calls_are_always_valid(stack, clients):
    oai, ant, _ = clients
    model = model_id(stack)
    names = [t["name"] for t in TOOLS]
    runs = []
    for q in TOOL_QUESTIONS:
        for stream in (False, True):
            runs.append((names, openai_call(oai, model, q, "required", stream)))
            runs.append((names, anthropic_call(ant, model, q, {"type": "any"}, stream)))
            for name in names:
                runs.append(([name], openai_call(oai, model, q, {
                    "type": "function", "function": {"name": name}}, stream)))
                runs.append(([name], anthropic_call(ant, model, q,
                                                    {"type": "tool", "name": name}, stream)))
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(allowed, coro):
        async with gate:
            calls, ended = await coro
        if len(calls) != 1:
            return f"{len(calls)} calls, not one: {calls} ({ended})"
        return valid_call(*calls[0], allowed)

    failures = [f for f in await asyncio.gather(*(one(a, c) for a, c in runs)) if f]
    assert not failures, f"{len(failures)} of {len(runs)} forced calls invalid:\n" + "\n".join(failures)


async def openai_auto(oai, model, question, choice, stream, seed):
    """(calls, text) of an answer where the model decides; `choice` None leaves tool_choice out
    (with tools given, that is auto)."""
    messages = ([{"role": "user", "content": question}] if question == NO_TOOL_QUESTION else
                openai_history(question))
    kw = dict(model=model, messages=messages, temperature=0.7,
              seed=seed, max_tokens=MAX_TOKENS, tools=[{"type": "function", "function": {
                  **t, "strict": i == 0}} for i, t in enumerate(TOOLS)])
    if choice is not None:
        kw["tool_choice"] = choice
    if not stream:
        choice0 = (await oai.chat.completions.create(**kw)).choices[0]
        m = choice0.message
        return ([(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls or []],
                m.content or "", choice0.finish_reason == "length")
    calls, text, finish = [], "", None
    async for chunk in await oai.chat.completions.create(**kw, stream=True):
        for ch in chunk.choices:
            text += ch.delta.content or ""
            for c in ch.delta.tool_calls or []:
                calls.append((c.function.name, json.loads(c.function.arguments)))
            finish = ch.finish_reason or finish
    return calls, text, finish == "length"


async def anthropic_auto(ant, model, question, choice, stream, seed):
    messages = ([{"role": "user", "content": question}] if question == NO_TOOL_QUESTION else
                anthropic_history(question))
    kw = dict(model=model, messages=messages,
              extra_body={"temperature": 0.7, "seed": seed}, max_tokens=MAX_TOKENS,
              tools=[{"name": t["name"], "description": t["description"],
                      "input_schema": t["parameters"]} for t in TOOLS])
    if choice is not None:
        kw["tool_choice"] = choice
    if not stream:
        r = await ant.messages.create(**kw)
        return ([(b.name, b.input) for b in r.content if b.type == "tool_use"],
                "".join(b.text for b in r.content if b.type == "text"), r.stop_reason == "max_tokens")
    calls, text, current, parts, stop = [], "", None, "", None
    async for ev in await ant.messages.create(**kw, stream=True):
        if ev.type == "content_block_start" and ev.content_block.type == "tool_use":
            current, parts = ev.content_block.name, ""
        elif ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
            parts += ev.delta.partial_json
        elif ev.type == "content_block_delta" and ev.delta.type == "text_delta":
            text += ev.delta.text
        elif ev.type == "content_block_stop" and current is not None:
            calls.append((current, json.loads(parts)))
            current = None
        elif ev.type == "message_delta":
            stop = ev.delta.stop_reason
    return calls, text, stop == "max_tokens"


async def test_calls_the_model_opens_itself_always_parse_and_validate(stack, clients):
    """tool_choice auto (and left out): the model may answer in text, and each call it opens is
    held to a listed tool with valid arguments from its `<tool_call>` on. A call that did not
    parse would come back as its text: none may, but for one that max_tokens cut (a sampled
    answer may run on in an argument's string): that one comes back as the text it was, last,
    and the answer says it was cut (gateway/toolcalls.py)."""
    oai, ant, _ = clients
    model = model_id(stack)
    names = [t["name"] for t in TOOLS]
    asks = [(openai_auto, oai, "auto"), (openai_auto, oai, None),
            (anthropic_auto, ant, {"type": "auto"})]
    runs = [(q, ask(c, model, q, choice, stream, seed))
            for seed, q in enumerate(AUTO_QUESTIONS) for ask, c, choice in asks
            for stream in (False, True)]
    runs += [(NO_TOOL_QUESTION, ask(c, model, NO_TOOL_QUESTION, choice, False, 0))
             for ask, c, choice in asks[::2]]
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(question, coro):
        async with gate:
            return question, *await coro

    failures, with_calls, calls_seen, cut = [], 0, 0, 0
    for question, calls, text, was_cut in await asyncio.gather(*(one(q, c) for q, c in runs)):
        opened = text.rfind("<tool_call>")
        if was_cut and opened >= 0 and "</tool_call>" not in text[opened:]:
            text, cut = text[:opened], cut + 1      # the call max_tokens cut, and only that one
        if "<tool_call>" in text or "</tool_call>" in text:
            failures.append(f"{question!r}: a call came back as text: {text!r}")
        failures += [f"{question!r}: {why}" for c in calls if (why := valid_call(*c, names))]
        if question == NO_TOOL_QUESTION and (calls or not text.strip()):
            failures.append(f"{question!r} needs no tool, yet: {calls} {text!r}")
        with_calls += bool(calls)
        calls_seen += len(calls)
    print(f"auto tools: {with_calls} of {len(runs)} answers held calls ({calls_seen} calls), "
          f"{cut} cut by max_tokens inside a call")
    assert not failures, "\n".join(failures)
    assert with_calls >= len(runs) // 3, f"only {with_calls} of {len(runs)} answers held a call"


async def test_an_unsupported_format_is_a_400_naming_it(stack, clients):
    oai, ant, oll = clients
    model = model_id(stack)
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError) as e:
        await oai.chat.completions.create(model=model, messages=msgs,
                                          response_format={"type": "xml"})
    assert "'xml' is not supported" in str(e.value) and e.value.body["param"] == "response_format.type"
    with pytest.raises(openai.BadRequestError) as e:     # the scheduler cannot compile it
        await oai.chat.completions.create(model=model, messages=msgs, response_format={
            "type": "json_schema", "json_schema": {"name": "a", "schema": {
                "type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}}})
    assert "bad_format" in str(e.value) and "example.com" in str(e.value)
    assert e.value.body["param"] == "response_format"
    with pytest.raises(anthropic.BadRequestError) as e:
        await ant.messages.create(model=model, messages=msgs, max_tokens=8,
                                  extra_body={"output_format": {"type": "yaml", "schema": {}}})
    assert "'yaml' is not supported" in str(e.value)
    # The Ollama client refuses other strings itself: a client that sends one gets the 400.
    async with aiohttp.ClientSession() as http:
        async with http.post(stack.http + "/api/chat", json={
                "model": model, "messages": msgs, "format": "xml"}) as r:
            assert r.status == 400 and "'xml' is not supported" in (await r.json())["error"]
