"""Embeddings in the pure policy and in the pooling of their chunks: an embedding is a prefill
and nothing else (no token drawn, no prefix-cache hit, its whole input may fill the context), it
rides in the batches beside generation, and its chunks' pooled parts make one vector however the
input was cut, started over when it is prefilled again."""

from __future__ import annotations

import numpy as np
import pytest

import wire
from bus.errors import PeerRestarted, ServiceError
from services.scheduler.batching import BadTokenIds, PromptTooLong, Request, Scheduler
from services.scheduler.batching.policy import pool_of_chunk
from services.scheduler.pipelines.pooling import (BadPooling, Pooled, embedding_inputs,
                                                  finish_vector)
from services.scheduler.pipelines.streams import RequestStream
from wire.failures import BAD_EMBED_INPUT
from wire.messages.sampling import SamplingParams

from .harness import req, run_to_end, samples_for, small
from .test_driver import answer, rig, rows  # noqa: F401 (rig: a fixture)


def embedding(rid, n, pooling="mean", first=1) -> Request:
    return Request(rid, tuple(range(first, first + n)), 1, pooling=pooling)


def test_an_embedding_is_chunks_beside_a_chat_and_ends_without_a_token():
    sched = Scheduler(small())                        # 16 tokens a batch, pages of 4
    sched.submit(req("chat", n=5, max_tokens=3))
    sched.submit(embedding("emb", 30))
    plans, outs = [], {}
    while (plan := sched.schedule()) is not None:
        plans.append(plan)
        for o in sched.complete(plan.batch_id, samples_for(plan)):
            outs.setdefault(o.request_id, []).append(o)
        sched.check()
    chunks = [c for p in plans for c in p.chunks if c.request_id == "emb"]
    assert [c.pool for c in chunks] == ["sum"] * len(chunks) and not any(c.sample for c in chunks)
    assert sum(len(c.token_ids) for c in chunks) == 30 and len(chunks) > 1
    assert [c.start for c in chunks] == [0, *np.cumsum([len(c.token_ids) for c in chunks])[:-1]]
    assert any({c.request_id for c in p.chunks} == {"chat", "emb"} for p in plans)
    (done,) = outs["emb"]
    assert done.token_id is None and done.finish.reason == "stop"
    assert len(outs["chat"]) == 3 and not sched.has_work()


@pytest.mark.parametrize("pooling, kinds", [("last", ["", "last"]), ("cls", ["first", ""])])
def test_last_and_cls_pool_only_the_chunk_holding_their_token(pooling, kinds):
    sched = Scheduler(small())
    sched.submit(embedding("e", 20, pooling))
    plans = []
    while (plan := sched.schedule()) is not None:
        plans.append(plan)
        sched.complete(plan.batch_id, {})
    assert [c.pool for p in plans for c in p.chunks] == kinds
    assert [pool_of_chunk(pooling, 0, True), pool_of_chunk("", 0, True)] == [kinds[0] or kinds[1], ""]


def test_an_embedding_takes_no_prefix_from_the_cache_but_may_fill_the_context():
    sched = Scheduler(small(vocab_size=128))
    sched.submit(req("a", n=20, max_tokens=1))
    run_to_end(sched)
    assert sched.stats()["pages_cached"] > 0
    sched.submit(embedding("e", 20))                  # the same 20 tokens: cached pages
    plan = sched.schedule()
    (chunk,) = plan.chunks
    assert chunk.start == 0 and chunk.cached == 0
    sched.complete(plan.batch_id, {})
    run_to_end(sched)
    sched.submit(embedding("full", 64))               # the whole context of 64
    run_to_end(sched)
    with pytest.raises(PromptTooLong):
        sched.submit(embedding("over", 65))
    with pytest.raises(BadTokenIds):
        sched.submit(Request("bad", (1, 10**6), 1, pooling="mean"))
    assert not sched.has_work()


def test_chunks_make_the_mean_however_cut_and_start_over_from_position_0():
    rows = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    whole = rows.astype(np.float64).mean(axis=0)
    p = Pooled("mean", 10)
    p.add(0, 3, rows[:3].sum(0))
    p.add(3, 7, rows[3:].sum(0) + 100)    # a stale result of a run that was then lost
    p.add(0, 4, rows[:4].sum(0))          # prefilled again from the start
    with pytest.raises(BadPooling):
        p.vector()                        # 4..10 has not come back yet
    p.add(4, 6, rows[4:].sum(0))
    assert np.allclose(p.vector(), whole, atol=1e-6) and p.vector().dtype == np.float32
    last = Pooled("last", 10)
    last.add(0, 6, rows[0])               # a chunk that pooled nothing of use to last
    last.add(6, 4, rows[9])
    assert np.array_equal(last.vector(), rows[9])
    with pytest.raises(BadPooling):
        Pooled("cls", 10).vector()


def test_dimensions_cut_then_normalize_and_inputs_are_checked():
    v = np.arange(1, 9, dtype=np.float32)
    assert np.allclose(finish_vector(v, 2, True), np.array([1, 2]) / np.sqrt(5))
    assert np.array_equal(finish_vector(v, None, False), v)
    assert np.array_equal(finish_vector(np.zeros(3, np.float32), None, True), np.zeros(3))
    assert embedding_inputs([[1] * 10, [2]], 8, truncate=True) == [[1] * 8, [2]]
    for inputs, why in (([[1] * 9], "input 0 has 9 tokens; the context holds 8"),
                        ([[1], []], "input 1 has no tokens")):
        with pytest.raises(ServiceError) as info:
            embedding_inputs(inputs, 8, truncate=False)
        assert info.value.code == BAD_EMBED_INPUT and why in str(info.value)


# ---- through the driver, with a fake pipeline whose last shard pools (tests/scheduler/test_driver)

def feature(token: int, position: int) -> np.ndarray:
    """The fake last shard's normed hidden state of a row: a function of token and position."""
    return np.array([token, position, token * position % 7, 1.0], np.float32)


def pooling_answer(body):
    parts = []
    for s, kind in zip(body.pool_rows, body.pool_kinds):
        tokens, positions = rows(body)[s]
        feats = [feature(int(t), int(p)) for t, p in zip(tokens, positions)]
        parts.append(np.sum(feats, axis=0) if kind == "sum" else feats[-1] if kind == "last"
                     else feats[0])
    return answer(body, pooled=wire.Tensor(np.array(parts, np.float32).reshape(len(parts), 4)))


async def test_the_driver_puts_an_embedding_together_across_chunks_and_a_restart(rig):
    r = rig()

    def restart(body):
        r.pipe.epochs[1] += 1          # shard-1 comes back with a new epoch and no KV
        raise PeerRestarted("shard-1 restarted")

    r.pipe.script = [pooling_answer] * 2 + [restart] + [pooling_answer] * 50
    r.submit("chat", n=5, max_tokens=6)
    prompt = tuple(range(3, 33))       # 30 tokens: chunks of at most 16, beside the chat
    r.policy.submit(Request("emb", prompt, 1, pooling="mean"))
    r.requests["emb"] = RequestStream("emb", 30, SamplingParams(), pooled=Pooled("mean", 30))
    r.driver.wake.set()
    await r.run_until_all_finish()
    assert r.finish("emb").reason == "stop" and r.finish("chat").reason == "length"
    want = np.mean([feature(t, p) for p, t in enumerate(prompt)], axis=0)
    np.testing.assert_allclose(r.requests["emb"].pooled.vector(), want, rtol=1e-6)
    assert r.driver.counters["recoveries"] == 1
    assert r.driver.counters["batches_pooled_and_sampled"] >= 1
    r.assert_nothing_left()
