"""The gateway's own endpoints and its behaviour under load and disconnects, on a real stack."""

from __future__ import annotations

import asyncio
import uuid
import json

import aiohttp
import pytest

from wire.messages.scheduler import StatsRequest

from ..serve.stack import call, wait_for
from .conftest import MAX_QUEUE

pytestmark = pytest.mark.slow


async def get(stack, path):
    async with aiohttp.ClientSession() as s:
        async with s.get(stack.http + path) as r:
            return r.status, await r.json()


async def post(stack, path, body):
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.http + path, json=body) as r:
            return r.status, r.headers, await r.json()


async def stats(stack) -> dict:
    return (await call(stack.endpoint, StatsRequest())).stats


async def idle(stack) -> dict | None:
    s = await stats(stack)
    return s if s["running"] == 0 and s["waiting"] == 0 and s["pages_used"] == 0 else None


async def scrape(stack) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families
    async with aiohttp.ClientSession() as s:
        async with s.get(stack.http + "/metrics") as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
            text = await r.text()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


async def test_health_and_the_cluster_map(stack):
    status, body = await get(stack, "/health")
    assert status == 200 and body["status"] == "ok", body
    status, view = await get(stack, "/v1/cluster")
    assert status == 200 and view["missing"] == []
    kinds = sorted(s["kind"] for s in view["services"])
    assert kinds == ["health", "scheduler", "shard", "shard", "tokenizer"]    # the gateway lists its peers
    assert all(s["state"] == "ready" and s["heartbeat_age_s"] < 2 for s in view["services"])
    layers = [m["layers"] for m in view["layer_map"]]
    assert layers[0][0] == 0 and all(a[1] == b[0] for a, b in zip(layers, layers[1:]))


async def test_tokenize_and_detokenize_round_trip(stack):
    text = "Tokyo is the capital of Japan. 東京"
    status, _, body = await post(stack, "/tokenize", {"content": text})
    assert status == 200 and all(isinstance(t, int) for t in body["tokens"])
    status, _, back = await post(stack, "/detokenize", {"tokens": body["tokens"]})
    assert status == 200 and back["content"] == text
    status, _, pieces = await post(stack, "/tokenize", {"content": "Tokyo", "with_pieces": True})
    assert "".join(p["piece"] for p in pieces["tokens"]) == "Tokyo"
    status, _, bad = await post(stack, "/detokenize", {"tokens": [1, "x"]})
    assert status == 400 and bad["error"]["param"] == "tokens"


async def test_tokenize_counts_the_prompt_a_completion_reports(stack):
    prompt = "The capital of France is"
    _, _, ids = await post(stack, "/tokenize", {"content": prompt, "add_special": True})
    status, _, body = await post(stack, "/v1/completions", {
        "model": (await get(stack, "/v1/models"))[1]["data"][0]["id"], "prompt": prompt,
        "max_tokens": 1, "temperature": 0})
    assert status == 200 and body["usage"]["prompt_tokens"] == len(ids["tokens"])


async def test_a_client_leaving_mid_stream_cancels_its_request(stack):
    before = await stats(stack)
    counted = ("llmbus_requests_finished_total", (("reason", "cancelled"),))
    before_metrics = await scrape(stack)
    model = (await get(stack, "/v1/models"))[1]["data"][0]["id"]
    async with aiohttp.ClientSession() as s:
        r = await s.post(stack.http + "/v1/chat/completions", json={
            "model": model, "stream": True, "max_tokens": 400, "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me a very long story about a dragon."}]})
        got = 0
        async for line in r.content:
            got += line.startswith(b"data: ")
            if got >= 4:
                break
        r.close()       # drop the connection mid-answer
    s = await wait_for(lambda: idle(stack), timeout=10)
    assert s["finished_cancelled"] == before.get("finished_cancelled", 0) + 1
    # ... and the gateway's metrics count it, once, by its reason.
    assert (await scrape(stack)).get(counted, 0) == before_metrics.get(counted, 0) + 1


async def test_a_full_queue_is_a_429_with_retry_after(stack):
    model = (await get(stack, "/v1/models"))[1]["data"][0]["id"]
    text = " ".join(f"Fact {k}: water is wet." for k in range(60))   # long: few run at once

    async def one(i):
        return await post(stack, "/v1/chat/completions", {
            "model": model, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": f"{i} {text}"}]})

    answers = await asyncio.gather(*(one(i) for i in range(MAX_QUEUE + 12)))
    refused = [(h, b) for status, h, b in answers if status == 429]
    assert refused, [a[0] for a in answers]
    assert all(status in (200, 429) for status, _, _ in answers), [a[2] for a in answers if a[0] not in (200, 429)]
    for headers, body in refused:
        assert int(headers["Retry-After"]) >= 1
        assert body["error"]["type"] == "rate_limit_error"
    await wait_for(lambda: idle(stack), timeout=60)


async def test_metrics_count_what_a_request_did(stack):
    model = (await get(stack, "/v1/models"))[1]["data"][0]["id"]
    before = await scrape(stack)
    status, _, body = await post(stack, "/v1/chat/completions", {
        "model": model, "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}]})
    assert status == 200
    after = await scrape(stack)

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("llmbus_generation_tokens_total") == body["usage"]["completion_tokens"]
    assert delta("llmbus_prompt_tokens_total") == body["usage"]["prompt_tokens"]
    assert delta("llmbus_time_to_first_token_seconds_count") == 1
    assert delta("llmbus_inter_token_latency_seconds_count") == body["usage"]["completion_tokens"] - 1
    assert delta("llmbus_http_requests_total", protocol="openai",
                 endpoint="/v1/chat/completions", status="200") == 1
    assert after[("llmbus_num_requests_running", ())] == 0
    shards = {dict(k[1])["shard"] for k in after if k[0] == "llmbus_shard_compute_seconds"}
    assert len(shards) == 2


async def test_metrics_show_queue_time_and_each_hop_of_a_request(stack, model_path):
    from services.modelstore.weights import read_config
    d_model = read_config(model_path)[0].d_model
    model = (await get(stack, "/v1/models"))[1]["data"][0]["id"]
    before = await scrape(stack)
    # A raw prompt that starts with text no earlier request had: no prefix-cache hit, so every
    # prompt token and every generated token but the last crosses each hop exactly once.
    status, _, body = await post(stack, "/v1/completions", {
        "model": model, "max_tokens": 5, "temperature": 0,
        "prompt": f"{uuid.uuid4().hex} is a code; the capital of Japan is"})
    assert status == 200
    after = await scrape(stack)
    fed = body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] - 1

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("llmbus_queue_time_seconds_count") == 1
    assert 0 <= delta("llmbus_queue_time_seconds_sum") < 60
    hops = [dict(k[1])["hop"] for k in after if k[0] == "llmbus_shard_hop_bytes_total"]
    sched_hop = next(h for h in hops if h.startswith("scheduler"))
    shard_hop = next(h for h in hops if not h.startswith("scheduler"))
    assert len(hops) == 2 and sched_hop.split(">")[1] == shard_hop.split(">")[0]
    # Token ids (int32) into the first shard; fp16 activations of d_model into the second.
    assert delta("llmbus_shard_hop_bytes_total", hop=sched_hop) == fed * 4
    assert delta("llmbus_shard_hop_bytes_total", hop=shard_hop) == fed * d_model * 2
    for hop in hops:
        batches = delta("llmbus_shard_hop_latency_seconds_count", hop=hop)
        assert 1 <= batches <= fed          # one prefill batch (or a few chunks), then decodes
        assert 0 < delta("llmbus_shard_hop_latency_seconds_sum", hop=hop) < batches * 5.0
