"""Embeddings through `llmbus up --shards 2` with the real default model and the official clients
(`openai` strict, `ollama`): /v1/embeddings, /api/embed and /api/embeddings. Each input is a
prefill through both shards, the last one pooling its final hidden states; the vectors are
llama.cpp's (tests/data/make_embed_refs.py) at cosine >= 0.999. Bad input is a 400 naming the
field and leaves nothing behind; 16 embedding requests beside 16 chats each end as they do alone.

Tolerance for "as alone": a shard computes each row of a batch independently of the other rows
(bit-identical alone and batched: tests/shard/test_pooling.py), and activations cross the shards
in fp16 row by row. What a busy pipeline changes is where an input's prefill is cut into chunks
(pacing beside decodes): the chunks' sums are added in float64, and the later chunk's attention
reads the earlier one's keys from the cache rather than from the batch. Measured in-process, a
cut moves a normalized vector's components by at most 2e-8 (float32's rounding of values ~0.05
is 3e-9); EMBED_TOL allows 50 times that. Chats are greedy: token for token the same.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import aiohttp
import numpy as np
import ollama
import openai
import pytest

from wire.messages.scheduler import StatsRequest

from .stack import Stack, call

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REF = json.loads((Path(__file__).parents[1] / "data" /
                  "smollm2-135m-q4_1.embeddings.llamacpp.json").read_text())
MIN_COSINE = 0.999
EMBED_TOL = 1e-6
WIDTH = 576          # SmolLM2-135M's embedding_length


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_path):
    s = Stack(tmp_path_factory.mktemp("runtime"), "--shards", "2", "--max-queue", "64",
              "--model", str(model_path))
    yield s
    s.close()


@pytest.fixture(scope="module")
def oai(stack):
    c = openai.OpenAI(base_url=stack.http + "/v1", api_key="unused", max_retries=0, timeout=300,
                      _strict_response_validation=True)
    yield c
    c.close()


@pytest.fixture(scope="module")
def model(oai):
    return oai.models.list().data[0].id


def unit(v) -> np.ndarray:
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v)


def cosine(a, b) -> float:
    return float(unit(a) @ unit(b))


def vectors(resp) -> list[np.ndarray]:
    assert [d.index for d in resp.data] == list(range(len(resp.data)))
    return [np.asarray(d.embedding, np.float32) for d in resp.data]


def floats(client, model, input, **kw) -> list[np.ndarray]:
    """The strict client's vectors, as floats (its strict mode cannot read base64: see below)."""
    return vectors(client.embeddings.create(model=model, input=input, encoding_format="float",
                                            **kw))


async def leftovers(stack) -> dict:
    s = (await call(stack.endpoint, StatsRequest())).stats
    return {k: s[k] for k in ("waiting", "running", "pages_used", "inflight_batches")}


def test_openai_embeddings_are_llama_cpp_s(stack, oai, model):
    got = oai.embeddings.create(model=model, input=REF["inputs"], encoding_format="float")
    assert got.model == model and got.object == "list"
    vecs = vectors(got)
    cos = [cosine(v, ref) for v, ref in zip(vecs, REF["pooling"]["mean"])]
    assert min(cos) >= MIN_COSINE, cos
    assert all(abs(np.linalg.norm(v) - 1) < 1e-5 for v in vecs)
    tokens = sum(len(ids) for ids in REF["ids"])
    assert (got.usage.prompt_tokens, got.usage.total_tokens) == (tokens, tokens)
    # Without encoding_format the client asks for base64 and decodes it after parsing: its
    # strict mode checks `embedding` as a list of floats before that, and refuses any server's
    # base64 (openai 3.57), so the default path is checked with the client as it ships.
    plain = openai.OpenAI(base_url=stack.http + "/v1", api_key="unused", max_retries=0)
    from_b64 = vectors(plain.embeddings.create(model=model, input=REF["inputs"]))
    plain.close()
    assert all(np.array_equal(a, b) for a, b in zip(vecs, from_b64))     # bit for bit
    raw = oai.with_raw_response.embeddings.create(model=model, input=REF["inputs"][0],
                                                  encoding_format="base64")
    b64 = json.loads(raw.text)["data"][0]["embedding"]
    assert isinstance(b64, str)
    assert np.array_equal(np.frombuffer(base64.b64decode(b64), "<f4"), vecs[0])
    # One string, one vector; token ids give the vector of the text they spell.
    (one,) = floats(oai, model, REF["inputs"][1])
    assert np.abs(one - vecs[1]).max() <= EMBED_TOL
    by_ids = floats(oai, model, [REF["ids"][2], REF["ids"][0]])
    assert np.abs(by_ids[0] - vecs[2]).max() <= EMBED_TOL
    assert np.abs(by_ids[1] - vecs[0]).max() <= EMBED_TOL
    (flat,) = floats(oai, model, REF["ids"][3])
    assert np.abs(flat - vecs[3]).max() <= EMBED_TOL
    # dimensions: the first n components, normalized again (Matryoshka truncation).
    (short,) = floats(oai, model, REF["inputs"][0], dimensions=64)
    assert short.shape == (64,)
    assert np.abs(short - unit(vecs[0][:64])).max() <= EMBED_TOL


def test_ollama_embed_and_the_older_embeddings(stack, oai, model):
    c = ollama.Client(host=stack.http, timeout=300)
    got = c.embed(model=model, input=REF["inputs"])
    assert got.prompt_eval_count == sum(len(ids) for ids in REF["ids"])
    want = floats(oai, model, REF["inputs"])
    assert len(got.embeddings) == len(want)
    for v, w in zip(got.embeddings, want):
        assert np.abs(np.asarray(v, np.float32) - w).max() <= EMBED_TOL
    (one,) = c.embed(model=model, input=REF["inputs"][2]).embeddings
    assert np.abs(np.asarray(one) - want[2]).max() <= EMBED_TOL
    # /api/embeddings: one prompt, its pooled vector as it is (not normalized), llama.cpp's.
    old = np.asarray(c.embeddings(model=model, prompt=REF["inputs"][3]).embedding)
    ref = np.asarray(REF["pooling"]["mean"][3])
    assert cosine(old, ref) >= MIN_COSINE
    assert abs(np.linalg.norm(old) / np.linalg.norm(ref) - 1) < 0.02


@pytest.mark.asyncio
async def test_bad_input_is_a_400_naming_it_and_leaves_nothing(stack, oai, model):
    ctx = (await aiohttp_json(stack, "GET", "/api/ps"))["models"][0]["context_length"]
    cases = [
        ("/v1/embeddings", {"model": model, "input": []}, "input"),
        ("/v1/embeddings", {"model": model, "input": ""}, "input[0]"),
        ("/v1/embeddings", {"model": model, "input": [["a"]]}, "input[0]"),
        ("/v1/embeddings", {"model": model, "input": ["a", 1]}, "input"),
        ("/v1/embeddings", {"model": model, "input": {"text": "a"}}, "input"),
        ("/v1/embeddings", {"model": model}, "input"),
        ("/v1/embeddings", {"model": model, "input": "a", "encoding_format": "int8"},
         "encoding_format"),
        ("/v1/embeddings", {"model": model, "input": "a", "dimensions": WIDTH + 1}, "dimensions"),
        ("/v1/embeddings", {"model": model, "input": "a", "dimensions": 0}, "dimensions"),
        ("/v1/embeddings", {"model": model, "input": [[0] * (ctx + 1)]}, "input"),
        ("/api/embed", {"model": model, "input": [1, 2]}, None),
        ("/api/embed", {"model": model, "input": [[0] * 3]}, None),
        ("/api/embeddings", {"model": model, "prompt": ""}, None),
        ("/api/embeddings", {"model": model}, None),
    ]
    async with aiohttp.ClientSession() as http:
        for path, body, param in cases:
            async with http.post(stack.http + path, json=body) as r:
                answer = await r.json()
                assert r.status == 400, (path, body, answer)
                if param is not None:
                    assert answer["error"]["param"] == param, (body, answer)
                    assert answer["error"]["type"] == "invalid_request_error"
                else:
                    assert isinstance(answer["error"], str) and answer["error"], answer
        # Too long for the context, with Ollama's truncate off: refused, naming the limit.
        long_text = "word " * (ctx + 10)
        async with http.post(stack.http + "/api/embed", json={
                "model": model, "input": ["short", long_text], "truncate": False}) as r:
            answer = await r.json()
            assert r.status == 400 and f"the context holds {ctx}" in answer["error"], answer
    with pytest.raises(openai.BadRequestError):
        oai.embeddings.create(model=model, encoding_format="float", input=[])
    # Nothing was queued or kept, and the next request is served.
    assert await leftovers(stack) == {"waiting": 0, "running": 0, "pages_used": 0,
                                      "inflight_batches": 0}
    assert len(floats(oai, model, ["still here"])) == 1


async def aiohttp_json(stack, method: str, path: str):
    async with aiohttp.ClientSession() as http:
        async with http.request(method, stack.http + path) as r:
            assert r.status == 200
            return await r.json()


CHATS = ["Name three primary colors.", "What is the boiling point of water?",
         "Write one sentence about cats.", "Count from one to ten."]
TOPICS = ["rivers", "mountains", "bread", "violins", "comets", "glaciers", "bees", "lanterns"]


def embed_texts() -> list[str]:
    """8 distinct inputs from a few tokens to about a hundred: the long ones are prefilled in
    chunks when decodes pace the batches."""
    return [f"Notes on {topic}, part {i}. " + f"The {topic} of region {i} are studied closely "
            f"every year. " * (1 + 3 * (i % 4)) for i, topic in enumerate(TOPICS)]


@pytest.mark.asyncio
async def test_16_embeddings_beside_16_chats_end_as_alone(stack, model):
    c = openai.AsyncOpenAI(base_url=stack.http + "/v1", api_key="unused", max_retries=0,
                           timeout=300, _strict_response_validation=True)

    async def chat(q):
        r = await c.chat.completions.create(model=model, messages=[{"role": "user", "content": q}],
                                            max_tokens=16, temperature=0.0)
        return r.choices[0].message.content, r.choices[0].finish_reason

    async def embed(text):
        r = await c.embeddings.create(model=model, encoding_format="float", input=text)
        return vectors(r)[0]

    # Each distinct request alone first (4 chats, 8 inputs), then 16 of each at once, every
    # request's twins compared with its alone run.
    texts = embed_texts()
    alone_chats = {q: await chat(q) for q in CHATS}
    alone_vecs = {t: await embed(t) for t in texts}
    before = (await call(stack.endpoint, StatsRequest())).stats
    asked = [(chat, CHATS[(i // 2) % len(CHATS)]) if i % 2 == 0 else
             (embed, texts[(i // 2) % len(texts)])
             for i in range(32)]                                    # chat, embed, chat, ...
    results = await asyncio.gather(*(fn(x) for fn, x in asked))
    for (fn, x), got in zip(asked, results):
        if fn is chat:
            assert got == alone_chats[x], x
    gaps = [float(np.abs(got - alone_vecs[x]).max()) for (fn, x), got in zip(asked, results)
            if fn is embed]
    assert len(gaps) == 16
    assert max(gaps) <= EMBED_TOL, gaps
    after = (await call(stack.endpoint, StatsRequest())).stats
    # They shared batches: rows that pool rode in batches with rows that sample. (In a run at
    # load 17, the 16 inputs came back as 45 pooled chunks, 15 batches with both kinds of rows.)
    assert after["driver.batches_pooled_and_sampled"] > before.get(
        "driver.batches_pooled_and_sampled", 0)
    assert after["driver.pooled_rows"] - before["driver.pooled_rows"] >= 16
    assert await leftovers(stack) == {"waiting": 0, "running": 0, "pages_used": 0,
                                      "inflight_batches": 0}
    await c.close()
