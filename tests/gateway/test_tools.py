"""Tools through the gateway with the strict official clients, against a real stack.

The default model rarely writes a well-formed call on its own, so the calls checked here are
forced (`tool_choice` naming the tool opens the call with its name; the model writes the
arguments): the answer must then be a call to that tool, in each protocol's shape, streamed
or not. Requests with tools and with tool results in the history must be accepted as well.
"""

from __future__ import annotations

import json
import urllib.request

import anthropic
import ollama
import openai
import pytest

pytestmark = pytest.mark.slow

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather",
                                           "description": "Current weather in a city",
                                           "parameters": PARAMS}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
FORCE = {"type": "function", "function": {"name": "get_weather"}}
HISTORY = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"}]


def test_openai_forced_call_comes_back_as_tool_calls(oai, model):
    r = oai.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice=FORCE,
                                    temperature=0, max_tokens=40)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments), dict)
    assert call.id.startswith("call_")


def test_openai_forced_call_streams_as_tool_call_deltas(oai, model):
    chunks = list(oai.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                              tool_choice=FORCE, temperature=0, max_tokens=40,
                                              stream=True))
    deltas = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].index == 0 and deltas[0].id
    assert deltas[0].function.name == "get_weather"
    assert isinstance(json.loads(deltas[0].function.arguments), dict)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_openai_accepts_tool_results_in_the_history(oai, model):
    r = oai.chat.completions.create(model=model, messages=HISTORY, tools=TOOLS,
                                    temperature=0, max_tokens=12)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # The rendered history holds the call and its result: more prompt than the question alone.
    alone = oai.chat.completions.create(model=model, messages=ASK, tools=TOOLS, max_tokens=1)
    assert r.usage.prompt_tokens > alone.usage.prompt_tokens


def test_openai_refuses_a_forced_tool_that_is_not_declared(oai, model):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model, messages=ASK, tools=TOOLS, max_tokens=2,
                                    tool_choice={"type": "function",
                                                 "function": {"name": "nope"}})
    assert e.value.body["param"] == "tool_choice"


@pytest.fixture(scope="module")
def claude(stack):
    c = anthropic.Anthropic(base_url=stack.http, api_key="unused", max_retries=0, timeout=120,
                            _strict_response_validation=True)
    yield c
    c.close()


A_TOOLS = [{"name": "get_weather", "description": "Current weather in a city",
            "input_schema": PARAMS}]
A_FORCE = {"type": "tool", "name": "get_weather"}
GREEDY = {"extra_body": {"temperature": 0}}


def test_anthropic_forced_call_is_a_tool_use_block(claude, model):
    m = claude.messages.create(model=model, max_tokens=40, messages=ASK, tools=A_TOOLS,
                               tool_choice=A_FORCE, **GREEDY)
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses[0].name == "get_weather" and isinstance(uses[0].input, dict)


def test_anthropic_forced_call_streams_as_a_tool_use_block(claude, model):
    with claude.messages.stream(model=model, max_tokens=40, messages=ASK, tools=A_TOOLS,
                                tool_choice=A_FORCE, **GREEDY) as s:
        events = [e.type for e in s]
        m = s.get_final_message()
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses[0].name == "get_weather" and isinstance(uses[0].input, dict)
    assert events[0] == "message_start" and events[-1] == "message_stop"


def test_anthropic_accepts_tool_use_and_tool_result_blocks(claude, model):
    history = [ASK[0],
               {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                                  "name": "get_weather",
                                                  "input": {"city": "Paris"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                             "content": "18 C and sunny"}]}]
    m = claude.messages.create(model=model, max_tokens=12, messages=history, tools=A_TOOLS,
                               **GREEDY)
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")
    n = claude.messages.count_tokens(model=model, messages=history, tools=A_TOOLS)
    assert n.input_tokens == m.usage.input_tokens


def test_ollama_accepts_tools_and_tool_results_streamed_or_not(stack, model):
    client = ollama.Client(host=stack.http)
    history = ASK + [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18 C and sunny"}]
    opts = {"temperature": 0, "num_predict": 8}
    r = client.chat(model=model, messages=history, tools=TOOLS, options=opts)
    assert r.done and r.done_reason in ("stop", "length")
    parts = list(client.chat(model=model, messages=history, tools=TOOLS, options=opts,
                             stream=True))
    assert parts[-1].done
    # Greedy: the stream says what the single answer said (text or calls alike).
    assert "".join(p.message.content or "" for p in parts) == r.message.content


# Ollama has no tool_choice; as Ollama does, a chat ending in an assistant message is continued,
# so a turn opened with a call to get_weather forces it (the model writes the city and closes the
# call: left to write the whole arguments object, the 135M model may write a JSON schema instead).
O_OPEN = ASK + [{"role": "assistant",
                 "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": '}]
O_OPTS = {"temperature": 0, "num_predict": 40}


def test_ollama_call_comes_back_as_tool_calls_with_arguments_an_object(stack, model):
    client = ollama.Client(host=stack.http, timeout=120)
    r = client.chat(model=model, messages=O_OPEN, tools=TOOLS, options=O_OPTS)
    calls = r.message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert isinstance(calls[0].function.arguments, dict) and calls[0].function.arguments
    assert "<tool_call>" not in r.message.content


def test_ollama_call_streams_as_tool_calls_too(stack, model):
    client = ollama.Client(host=stack.http, timeout=120)
    whole = client.chat(model=model, messages=O_OPEN, tools=TOOLS, options=O_OPTS)
    parts = list(client.chat(model=model, messages=O_OPEN, tools=TOOLS, options=O_OPTS,
                             stream=True))
    calls = [c for p in parts for c in (p.message.tool_calls or [])]
    assert parts[-1].done and len(calls) == 1
    # Greedy: the streamed call is the one the single answer made.
    assert calls[0].function.name == whole.message.tool_calls[0].function.name
    assert calls[0].function.arguments == whole.message.tool_calls[0].function.arguments


def test_ollama_tool_results_reach_the_model(stack, model):
    client = ollama.Client(host=stack.http, timeout=120)
    call = [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}]
    result = "18 degrees Celsius, sunny, light wind from the west"
    opts = {"temperature": 0, "num_predict": 1}
    without = client.chat(model=model, messages=ASK + call, tools=TOOLS, options=opts)
    with_result = client.chat(model=model, messages=ASK + call + [
        {"role": "tool", "content": result}], tools=TOOLS, options=opts)
    # The rendered prompt grows by at least the result's own tokens (counted by /tokenize).
    req = urllib.request.Request(stack.http + "/tokenize", data=json.dumps(
        {"content": result}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        result_tokens = len(json.load(r)["tokens"])
    assert with_result.prompt_eval_count >= without.prompt_eval_count + result_tokens
