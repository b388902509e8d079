"""Prompts far past one micro-batch (`--max-batch-tokens` 512) through `llmbus up --shards 3`, alone
and beside short requests: each is prefilled over as many batches as it takes and answers the
in-process model's greedy tokens exactly (every row is computed alone, so chunking changes no bit)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from wire.codecs import CODECS
from wire.messages.scheduler import Generate

from .stack import Stack, generate

# The reference prefills ~6.6k tokens in process and each test's stack as many again: ~20k tokens,
# minutes on a CPU with AVX2 alone (~140 tokens/s a core at 1024 tokens with attention tiled, ~70
# before), far more on a shared machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

MAX_TOKENS = 12
LONG = (600, 2000, 4000)        # prompt tokens, about
SHORT = ["What is the capital of Japan?", "Name a color.", "Say hello.", "What is 2 + 2?",
         "Name a fruit.", "Write one word about snow.", "Who wrote Hamlet?", "Count to three."]
COLORS = ("red", "green", "blue", "yellow", "black", "white", "orange")


def long_text(i: int) -> str:
    return (f"Sentence {i}: the {COLORS[i % len(COLORS)]} box on shelf {i % 13} holds "
            f"{i * 7 % 100} marbles.")


@pytest.fixture(scope="module")
def prompts(model_path) -> list[list[int]]:
    """Chat prompts of about LONG tokens (numbered sentences, then a question), then the short ones."""
    from services.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(model_path)
    chat = lambda text: tok.encode_chat([{"role": "user", "content": text}])   # noqa: E731
    question = " How many marbles does box 3 hold?"
    per = len(tok.encode(" ".join(long_text(i) for i in range(100)))) / 100     # tokens a sentence
    out = []
    for n in LONG:
        k = int((n - len(chat(question))) / per)
        out.append(chat(" ".join(long_text(i) for i in range(k)) + question))
        assert abs(len(out[-1]) - n) < 0.1 * n, (n, len(out[-1]))
    return out + [chat(q) for q in SHORT]


@pytest.fixture(scope="module")
def expected(model_path, prompts) -> list[tuple[list[int], str]]:
    """Greedy tokens and finish reason of the in-process model: the stack's shards (ranges, weight format) with the
    stack's fp16 hop between them, each prompt prefilled in 512-token chunks, up to EOS or MAX_TOKENS."""
    from services.scheduler.placement.policy import head_cost_in_layers, split_layers
    from services.modelstore.weight_cache import load_weights
    from services.shard.kv_cache import KVConfig, PagedKVCache
    from services.shard.inprocess import Chunk, PageAllocator, Pipeline, build_batch
    from services.shard.model import ShardModel
    from services.shard.service import weight_format
    from services.tokenizer import Tokenizer
    from services.modelstore.gguf_meta import read_metadata

    meta = read_metadata(model_path)
    pages = PageAllocator(num_pages=320, page_size=16)
    shards = []
    for a, b in split_layers(30, 3, head_cost_in_layers(meta)):
        loaded = load_weights(model_path, a, b, weight_format("cpu", "auto"))
        kv = PagedKVCache.for_model(loaded.config, a, b, KVConfig(pages.num_pages, pages.page_size))
        shards.append(ShardModel(loaded.config, loaded.weights, kv))
    fp16 = CODECS["fp16"]

    def hop(h):                          # what a shard's hand-on does: encode, then decode float32
        meta_, bufs = fp16.encode(h)
        return fp16.decode(meta_, "float32", h.shape, [memoryview(b).cast("B") for b in bufs])

    pipe, eos = Pipeline(shards, hop), Tokenizer.from_gguf(model_path).eot_ids
    out = []
    for n, ids in enumerate(prompts):
        start, tokens = 0, []
        while start < len(ids):
            chunk = ids[start:start + 512]
            logits = pipe.forward(build_batch([Chunk(n, chunk, start)], pages,
                                              want_logits=[start + len(chunk) == len(ids)]))
            start += len(chunk)
        tokens.append(int(np.argmax(logits[0])))
        while len(tokens) < MAX_TOKENS and tokens[-1] not in eos:
            logits = pipe.forward(build_batch([Chunk(n, [tokens[-1]], start)], pages))
            start += 1
            tokens.append(int(np.argmax(logits[0])))
        pages.release(n)
        out.append((tokens, "stop" if tokens[-1] in eos else "length"))
    return out


@pytest.fixture
def stack(tmp_path_factory, model_path, expected):   # after the reference: they share two cores
    """A fresh stack for each test: nothing of the long prompts is in its prefix cache, so every
    one is prefilled chunk by chunk, and one reference serves both tests."""
    s = Stack(tmp_path_factory.mktemp("runtime"), "--shards", "3", "--model", str(model_path))
    yield s
    s.close()


def body(ids: list[int]) -> Generate:
    return Generate(prompt_ids=ids, temperature=0.0, max_tokens=MAX_TOKENS)


def check(res, ids, expected, what: str) -> None:
    want, reason = expected
    assert res.done is not None, f"{what}: no Done"
    assert res.started.prompt_tokens == len(ids)
    assert res.token_ids == want, f"{what}: {res.token_ids} != {want} ({res.done})"
    assert res.done.finish_reason == reason, res.done
    assert res.done.completion_tokens == len(want)


async def test_long_prompts_alone_answer_the_in_process_greedy_tokens(stack, prompts, expected):
    for ids, want in zip(prompts[:len(LONG)], expected):
        res = await asyncio.wait_for(generate(stack.endpoint, body(ids), idle_timeout=600), 900)
        check(res, ids, want, f"{len(ids)} tokens alone")


async def test_long_prompts_beside_short_requests_answer_the_same(stack, prompts, expected):
    # Generous: a 4000-token prompt is ~20 s of prefill on a quiet machine, ten times that on a busy one.
    results = await asyncio.wait_for(asyncio.gather(*(generate(stack.endpoint, body(ids), idle_timeout=600)
                                                      for ids in prompts)), 1200)
    for ids, want, res in zip(prompts, expected, results):
        check(res, ids, want, f"{len(ids)} tokens among {len(prompts)}")
