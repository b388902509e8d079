"""The official `ollama` client against a real stack through the gateway."""

from __future__ import annotations

import json

import aiohttp
import ollama
import pytest

from services.modelstore.pull import DEFAULT_MODEL

pytestmark = pytest.mark.slow

JAPAN = [{"role": "user", "content": "What is the capital of Japan?"}]
ANSWER = "The capital of Japan is Tokyo."
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def client(stack):
    return ollama.Client(host=stack.http, timeout=120)


@pytest.fixture(scope="module")
def model(client):
    return client.list().models[0].model


def test_chat_answers_with_counts_and_durations(client, model):
    r = client.chat(model=model, messages=JAPAN, options=GREEDY, stream=False)
    assert r.message.role == "assistant" and r.message.content == ANSWER
    assert r.done and r.done_reason == "stop" and r.eval_count > 0 and r.prompt_eval_count > 0
    # Nanoseconds: the parts add up to at most the whole, which took well over a millisecond.
    assert r.total_duration > 1_000_000
    assert r.prompt_eval_duration + r.eval_duration <= r.total_duration


def test_chat_streams_pieces_then_a_final_line(client, model):
    parts = list(client.chat(model=model, messages=JAPAN, options=GREEDY, stream=True))
    assert "".join(p.message.content for p in parts) == ANSWER
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1].eval_count > 0 and parts[-1].done_reason == "stop"


async def test_the_stream_is_ndjson_without_blank_lines(stack, model):
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.http + "/api/chat", json={
                "model": model, "messages": JAPAN, "options": GREEDY}) as r:
            assert r.headers["Content-Type"].startswith("application/x-ndjson")
            raw = (await r.read()).decode()
    lines = raw.split("\n")
    assert lines[-1] == "" and all(lines[:-1])
    assert json.loads(lines[-2])["done"] is True


def test_generate_with_num_predict_and_stop(client, model):
    r = client.generate(model=model, prompt="What is the capital of Japan?",
                        options={**GREEDY, "num_predict": 3})
    assert r.done_reason == "length" and r.eval_count == 3 and ANSWER.startswith(r.response)
    r = client.generate(model=model, prompt="What is the capital of Japan?",
                        options={**GREEDY, "stop": ["Tokyo"], "seed": 7})
    assert r.response == "The capital of Japan is " and r.done_reason == "stop"


def test_listing_showing_and_version(client, model):
    (entry,) = client.list().models
    assert entry.details.format == "gguf" and entry.details.family == "llama"
    assert entry.details.quantization_level == "Q4_1" and entry.details.parameter_size == "135M"
    assert entry.size > 0
    shown = client.show(model)
    assert shown.details.family == "llama" and shown.modelinfo["llama.context_length"] > 0
    assert client.ps().models[0].model == model
    assert client.show(model + ":latest").details.format == "gguf"


async def test_version(stack):
    async with aiohttp.ClientSession() as s:
        async with s.get(stack.http + "/api/version") as r:
            assert r.status == 200 and (await r.json())["version"]


def test_an_unknown_model_is_a_404(client):
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="llama9:70b", messages=JAPAN)
    assert e.value.status_code == 404 and "llama9:70b" in e.value.error


def test_a_last_assistant_message_is_continued(client, model):
    start = "The capital of Japan is"
    r = client.chat(model=model, messages=JAPAN + [{"role": "assistant", "content": start}],
                    options=GREEDY)
    # Greedy: the continuation of the answer's own start is the rest of that answer.
    assert r.message.content == ANSWER.removeprefix(start)


def test_pull_tells_its_progress_as_ollama_does_and_ends_in_success(client, model_path):
    # The default model is in this machine's cache (the stack serves it): nothing is fetched.
    lines = list(client.pull(DEFAULT_MODEL.name, stream=True))
    statuses = [p.status for p in lines]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    layer = [p for p in lines if p.digest]
    assert layer and layer[-1].digest == "sha256:" + DEFAULT_MODEL.sha256
    assert layer[-1].completed == layer[-1].total == model_path.stat().st_size
    assert client.pull(DEFAULT_MODEL.name.upper() + ":latest", stream=False).status == "success"
    with pytest.raises(ollama.ResponseError) as e:
        client.pull("no-such-model")
    assert e.value.status_code == 404 and DEFAULT_MODEL.name in e.value.error
