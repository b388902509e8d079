"""Preemption when pages run out, cancellation, lost batches and shard failures."""

import pytest

from services.scheduler.batching import Scheduler, UnknownBatch

from .harness import req, run_to_end, samples_for, small, step


def test_when_pages_run_out_the_latest_lowest_priority_sequence_is_preempted_and_recomputed():
    # 6 pages of 4 tokens; three sequences of 7 prompt tokens need 2 pages each, then a third.
    sched = Scheduler(small(num_pages=6, context_length=24, max_batch_tokens=32))
    sched.submit(req("a", n=7, first=10, max_tokens=6))
    sched.submit(req("b", n=7, first=30, max_tokens=6, priority="low"))
    sched.submit(req("c", n=7, first=50, max_tokens=6))
    plan, _ = step(sched)
    assert sorted(c.request_id for c in plan.chunks) == ["a", "b", "c"]
    step(sched)
    plan, _ = step(sched)       # each holds 9 tokens now: the decode needs a third page
    assert [c.request_id for c in plan.chunks] == ["a", "c"]
    assert sched.stats()["preemptions"] == 1
    victim = sched._seqs["b"]
    assert victim.pages == [] and victim.num_computed == 0 and victim.num_generated == 2
    outs = run_to_end(sched)
    assert all(o[-1].finish.reason == "length" for o in outs.values())


def test_a_preempted_sequence_is_prefilled_again_from_prompt_and_generated_tokens():
    sched = Scheduler(small(num_pages=4, context_length=16, max_batch_tokens=16))
    sched.submit(req("low", n=5, first=10, max_tokens=8, priority="low"))
    step(sched)
    step(sched)                                  # low: 5 prompt + 2 generated tokens
    generated = sched._seqs["low"].tokens[5:]
    sched.submit(req("high", n=11, first=40, max_tokens=2, priority="high"))
    plan, _ = step(sched)
    assert [c.request_id for c in plan.chunks] == ["high"]   # took low's pages
    chunks = []
    while sched.is_tracked("low"):
        plan, _ = step(sched)
        chunks += [c for c in plan.chunks if c.request_id == "low"]
    refill = chunks[0]
    history = tuple(range(10, 15)) + tuple(generated)
    # Its full prompt page was still in the prefix cache; the rest is computed again.
    assert refill.start == refill.cached == 4
    assert refill.token_ids == history[4:] and refill.sample and refill.step == 2


def test_cancel_frees_pages_at_once_even_while_in_flight():
    sched = Scheduler(small(max_inflight=2))
    sched.submit(req("a", n=10, max_tokens=8))
    sched.submit(req("b", n=6, first=50))
    plan = sched.schedule()
    before = sched.stats()["pages_used"]
    out = sched.cancel("a")
    assert out.finish.reason == "cancelled" and out.text == ""
    assert sched.stats()["pages_used"] == before - 3
    outs = sched.complete(plan.batch_id, samples_for(plan))   # the late result of a is dropped
    assert [o.request_id for o in outs] == ["b"]
    assert sched.cancel("a") is None
    sched.check()


def test_a_waiting_request_can_be_cancelled():
    sched = Scheduler(small())
    sched.submit(req("a"))
    assert sched.cancel("a").finish.reason == "cancelled"
    assert not sched.has_work() and sched.schedule() is None


def test_fail_ends_a_request_with_its_reason():
    sched = Scheduler(small())
    sched.submit(req("a"))
    step(sched)
    out = sched.fail("a", "shard 2 out of memory")
    assert out.finish.reason == "failed" and out.finish.detail == "shard 2 out of memory"
    assert sched.stats()["pages_used"] == 0


def test_an_aborted_batch_runs_the_same_chunk_again():
    sched = Scheduler(small(max_batch_tokens=4))
    sched.submit(req("a", n=6))
    first = sched.schedule()
    sched.abort_batch(first.batch_id)
    again = sched.schedule()
    assert again.chunks[0].token_ids == first.chunks[0].token_ids
    assert again.chunks[0].page_table == first.chunks[0].page_table
    with pytest.raises(UnknownBatch):
        sched.abort_batch(first.batch_id)


def test_shard_failure_reprefills_every_interrupted_sequence_and_forgets_the_cache():
    sched = Scheduler(small(max_inflight=2, max_batch_seqs=1))
    sched.submit(req("a", n=9, first=10, max_tokens=5))
    sched.submit(req("b", n=9, first=40, max_tokens=5))
    step(sched)
    step(sched)
    a_tokens = list(sched._seqs["a"].tokens)
    lost = sched.schedule()                     # in flight when the shard dies
    sched.reset_for_recovery()
    with pytest.raises(UnknownBatch):
        sched.complete(lost.batch_id, samples_for(lost))
    stats = sched.stats()
    assert stats["pages_used"] == 0 and stats["pages_cached"] == 0 and stats["waiting"] == 2
    plan = sched.schedule()
    assert plan.chunks[0].request_id == "a"
    assert list(plan.chunks[0].token_ids) == a_tokens and plan.chunks[0].cached == 0
    refilled = sched.complete(plan.batch_id, samples_for(plan))
    assert [o.request_id for o in refilled] == ["a"]
    outs = run_to_end(sched)
    # Nothing is generated twice or lost: tokens before the failure + after it == max_tokens.
    assert (len(a_tokens) - 9) + 1 + len(outs["a"]) == 5
    assert outs["a"][-1].finish.reason == "length"
    assert outs["b"][-1].finish.reason == "length"


def test_no_count_of_recoveries_fails_a_request():
    sched = Scheduler(small())
    sched.submit(req("a", max_tokens=50))
    for _ in range(20):                        # however often its KV is lost ...
        step(sched)
        sched.reset_for_recovery()
    assert sched.is_tracked("a")               # ... it is re-prefilled, never failed for it
    outs = run_to_end(sched)
    assert outs["a"][-1].finish.reason == "length"


def test_fail_all_ends_every_request_with_the_reason_and_frees_everything():
    sched = Scheduler(small(max_inflight=2))
    sched.submit(req("a", first=10))
    sched.submit(req("b", first=40))
    step(sched)
    sched.schedule()                           # in flight when the pipeline is given up on
    outs = sched.fail_all("layers 15-30 unserved")
    assert sorted(o.request_id for o in outs) == ["a", "b"]
    assert all(o.finish.reason == "failed" and o.finish.detail == "layers 15-30 unserved"
               for o in outs)
    assert not sched.has_work() and sched.inflight == () and sched.stats()["pages_used"] == 0
    sched.check()


def test_reset_one_sequence_requeues_it_and_ignores_its_in_flight_result():
    sched = Scheduler(small())
    sched.submit(req("a", max_tokens=5))
    sched.submit(req("b", first=20, max_tokens=5))
    step(sched)
    plan = sched.schedule()
    assert sched.reset_sequence("a") is None
    outs = sched.complete(plan.batch_id, samples_for(plan))
    assert [o.request_id for o in outs] == ["b"]
    nxt = sched.schedule()
    a = next(c for c in nxt.chunks if c.request_id == "a")
    assert a.start == a.cached == 4     # its prompt page is still in the (intact) prefix cache
    sched.check()


def test_a_sequence_in_flight_is_never_preempted():
    sched = Scheduler(small(num_pages=4, context_length=16, max_inflight=2))
    sched.submit(req("low", n=12, first=10, max_tokens=4, priority="low"))
    first = sched.schedule()                     # low holds 3 of the 4 pages, in flight
    sched.submit(req("high", n=7, first=40, priority="high"))
    second = sched.schedule()
    (chunk,) = second.chunks                     # high gets the one free page: a 4-token chunk
    assert chunk.request_id == "high" and len(chunk.token_ids) == 4 and not chunk.sample
    assert sched._seqs["low"].pages == list(first.chunks[0].page_table)
    sched.complete(first.batch_id, samples_for(first))
    sched.complete(second.batch_id, {})
    third = sched.schedule()                     # now low is idle: high preempts it
    assert [c.request_id for c in third.chunks] == ["high"]
    assert sched.stats()["preemptions"] == 1 and not sched._seqs["low"].pages
    sched.complete(third.batch_id, samples_for(third))
    outs = run_to_end(sched)
    assert outs["low"][-1].finish.reason == "length"
