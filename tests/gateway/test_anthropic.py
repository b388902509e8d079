"""The official `anthropic` client, strict, against a real stack through the gateway."""

from __future__ import annotations

import json

import aiohttp
import anthropic
import pytest

pytestmark = pytest.mark.slow

JAPAN = [{"role": "user", "content": "What is the capital of Japan?"}]
ANSWER = "The capital of Japan is Tokyo."
# This SDK has no temperature argument: greedy decoding goes in the body.
GREEDY = {"extra_body": {"temperature": 0}}


@pytest.fixture(scope="module")
def client(stack):
    c = anthropic.Anthropic(base_url=stack.http, api_key="unused", max_retries=0, timeout=120,
                            _strict_response_validation=True)
    yield c
    c.close()


def test_a_greedy_answer(client, model):
    m = client.messages.create(model=model, max_tokens=40, messages=JAPAN, **GREEDY)
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == ANSWER
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.id.startswith("msg_") and m.model == model and m.role == "assistant"
    assert m.usage.output_tokens > 0
    # count_tokens counts exactly the prompt the answer was generated from.
    assert client.messages.count_tokens(model=model, messages=JAPAN).input_tokens == \
        m.usage.input_tokens


def test_system_as_a_string_or_as_blocks_is_the_same_prompt(client, model):
    as_str = client.messages.create(model=model, max_tokens=8, messages=JAPAN,
                                    system="Answer briefly.", **GREEDY)
    as_blocks = client.messages.create(model=model, max_tokens=8, messages=JAPAN, system=[
        {"type": "text", "text": "Answer "}, {"type": "text", "text": "briefly."}], **GREEDY)
    assert as_str.content[0].text == as_blocks.content[0].text
    assert as_str.usage.input_tokens == as_blocks.usage.input_tokens
    bare = client.messages.count_tokens(model=model, messages=JAPAN).input_tokens
    assert as_str.usage.input_tokens != bare


def test_stop_sequences_say_which_matched(client, model):
    m = client.messages.create(model=model, max_tokens=40, messages=JAPAN,
                               stop_sequences=["Osaka", "Tokyo"], **GREEDY)
    assert m.content[0].text == "The capital of Japan is "
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "Tokyo"


def test_max_tokens_ends_with_max_tokens(client, model):
    m = client.messages.create(model=model, max_tokens=3, messages=JAPAN,
                               extra_body={"temperature": 0, "top_k": 1})
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3


def test_streaming_through_the_sdk(client, model):
    with client.messages.stream(model=model, max_tokens=40, messages=JAPAN, **GREEDY) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == ANSWER and final.content[0].text == ANSWER
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0


async def test_stream_events_are_named_and_in_order(stack, model):
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.http + "/v1/messages", json={
                "model": model, "max_tokens": 40, "messages": JAPAN, "temperature": 0,
                "stream": True, "stop_sequences": ["Tokyo"]}) as r:
            assert r.status == 200
            raw = (await r.read()).decode()
    events = []
    for block in raw.strip().split("\n\n"):
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        body = json.loads(data[len("data: "):])
        assert body["type"] == name[len("event: "):]
        events.append(body)
    names = [e["type"] for e in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert "".join(e["delta"]["text"] for e in events[3:-3]) == "The capital of Japan is "
    delta = events[-2]
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "Tokyo"}
    assert delta["usage"]["output_tokens"] > 0
    assert events[0]["message"]["usage"]["input_tokens"] > 0


async def test_max_tokens_is_required(stack, model):
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.http + "/v1/messages", json={"model": model,
                                                             "messages": JAPAN}) as r:
            body = await r.json()
    assert r.status == 400 and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]


def test_an_unknown_model_is_a_not_found_error(client):
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-unknown", max_tokens=5, messages=JAPAN)
    assert e.value.body["error"]["type"] == "not_found_error"
