"""Continuous batching: priorities, token budget, chunked prefill, micro-batches, prefix reuse."""

import pytest

from services.scheduler.batching import BadCompletion, Request, SampledToken, Scheduler, UnknownBatch

from .harness import LINE, req, run_to_end, samples_for, small, step


def ids(plan):
    return [c.request_id for c in plan.chunks]


def test_high_before_normal_before_low_and_fifo_within_a_priority():
    sched = Scheduler(small(max_batch_tokens=6))
    for i, (rid, prio) in enumerate([("low", "low"), ("n1", "normal"), ("high", "high"),
                                     ("n2", "normal")]):
        sched.submit(req(rid, n=6, first=100 * i, priority=prio))  # distinct: no prefix hits
    order = []
    while len(order) < 4:
        plan, _ = step(sched)
        order += [c.request_id for c in plan.chunks if c.start == 0]
    assert order == ["high", "n1", "n2", "low"]


def test_decode_tokens_go_before_prefill_chunks():
    sched = Scheduler(small(max_batch_tokens=8))
    sched.submit(req("first", n=4, max_tokens=10, priority="low"))
    step(sched)                                   # first is now decoding
    sched.submit(req("urgent", n=20, priority="high"))
    plan, _ = step(sched)
    assert ids(plan) == ["first", "urgent"]
    assert len(plan.chunks[0].token_ids) == 1 and len(plan.chunks[1].token_ids) == 7


def test_long_prompt_is_prefilled_in_chunks_and_samples_only_at_the_end():
    sched = Scheduler(small(max_batch_tokens=8))
    prompt = tuple(range(1, 21))
    sched.submit(req("long", n=20, max_tokens=3))
    chunks = [step(sched)[0].chunks[0] for _ in range(3)]
    assert [(c.start, len(c.token_ids), c.sample) for c in chunks] == \
        [(0, 8, False), (8, 8, False), (16, 4, True)]
    assert sum((c.token_ids for c in chunks), ()) == prompt
    assert all(len(c.page_table) * 4 >= c.start + len(c.token_ids) for c in chunks)
    assert chunks[0].page_table == chunks[2].page_table[:2]   # the table only grows


def test_finished_sequences_leave_and_waiting_ones_join_every_step():
    sched = Scheduler(small(max_batch_seqs=2))
    sched.submit(req("a", max_tokens=1))
    sched.submit(req("b", max_tokens=3))
    sched.submit(req("c", max_tokens=3))
    plan, outs = step(sched)
    assert ids(plan) == ["a", "b"] and [o.finish.reason for o in outs if o.finish] == ["length"]
    plan, _ = step(sched)
    assert ids(plan) == ["b", "c"]               # a left, c joined in the same step


def test_a_sequence_in_flight_is_not_scheduled_again_until_its_result_returns():
    sched = Scheduler(small(max_inflight=3))
    sched.submit(req("a", max_tokens=5))
    sched.submit(req("b", max_tokens=5))
    first = sched.schedule()
    assert ids(first) == ["a", "b"]
    assert sched.schedule() is None              # both are busy
    sched.submit(req("c"))
    second = sched.schedule()
    assert ids(second) == ["c"]
    sched.complete(first.batch_id, samples_for(first))
    third = sched.schedule()
    assert ids(third) == ["a", "b"] and all(len(c.token_ids) == 1 for c in third.chunks)


def test_no_more_than_max_inflight_batches():
    sched = Scheduler(small(max_inflight=2, max_batch_seqs=1))
    for i in range(4):
        sched.submit(req(f"r{i}"))
    assert sched.schedule() and sched.schedule()
    assert sched.schedule() is None
    assert len(sched.inflight) == 2


def test_step_index_and_seed_travel_with_each_chunk():
    sched = Scheduler(small())
    sched.submit(req("r", max_tokens=4, seed=1234))
    steps = []
    for _ in range(4):
        c = step(sched)[0].chunks[0]
        steps.append(c.step)
        assert c.seed == 1234
    assert steps == [0, 1, 2, 3]


def test_second_turn_skips_cached_positions_and_counts_the_hit():
    sched = Scheduler(small())
    sched.submit(req("turn1", n=9, max_tokens=4))
    outs = run_to_end(sched)["turn1"]
    history = tuple(range(1, 10)) + tuple(o.token_id for o in outs)
    sched.submit(Request("turn2", history + (90, 91, 92), 2))
    chunk = sched.schedule().chunks[0]
    assert chunk.start == chunk.cached == 12         # 3 full pages of prompt + generated tokens
    assert chunk.token_ids == history[12:] + (90, 91, 92)
    stats = sched.stats()
    assert stats["prefix_hit_tokens"] == 12
    assert stats["prefix_hit_rate"] == pytest.approx(12 / (9 + 16))


def test_outputs_stream_text_and_end_with_one_finish():
    sched = Scheduler(small())
    sched.submit(req("r", max_tokens=3))
    outs = run_to_end(sched)["r"]
    assert [o.finish is None for o in outs] == [True, True, False]
    assert outs[-1].finish.reason == "length"
    assert "".join(o.text for o in outs) == "".join(f"w{o.token_id} " for o in outs)


def test_eos_and_stop_strings_end_a_sequence_and_free_its_pages():
    sched = Scheduler(small())
    sched.submit(req("eos", max_tokens=10))
    sched.submit(req("stop", max_tokens=10, stop=("w9",)))
    plan = sched.schedule()
    sched.complete(plan.batch_id, {"eos": SampledToken(0), "stop": SampledToken(9)})
    assert not sched.has_work()
    assert sched.stats()["pages_used"] == 0
    assert sched.stats()["finished_stop"] == 2


def test_complete_refuses_a_result_that_does_not_match_the_plan():
    sched = Scheduler(small(max_batch_tokens=4))
    sched.submit(req("r", n=6))
    plan = sched.schedule()                      # a prefill chunk: nothing to sample
    with pytest.raises(BadCompletion):
        sched.complete(plan.batch_id, {"r": SampledToken(3)})
    with pytest.raises(BadCompletion):
        sched.complete(plan.batch_id, {"ghost": SampledToken(3)})
    sched.complete(plan.batch_id, {})
    plan = sched.schedule()
    with pytest.raises(BadCompletion):
        sched.complete(plan.batch_id, {})        # the last chunk must come back with a token
    with pytest.raises(BadCompletion):
        sched.complete(plan.batch_id, {"r": 3})
    sched.complete(plan.batch_id, {"r": SampledToken(3)})
    with pytest.raises(UnknownBatch):
        sched.complete(plan.batch_id, {"r": SampledToken(3)})


def test_a_request_looping_on_one_line_is_stopped_and_its_pages_freed():
    sched = Scheduler(small(loop_repeats=3, loop_window=6, loop_min_chars=5))
    sched.submit(req("loop", max_tokens=50))
    finish = None
    for _ in range(10):
        plan = sched.schedule()
        (out,) = sched.complete(plan.batch_id, {"loop": SampledToken(LINE)})
        if out.finish:
            finish = out.finish
            break
    assert finish.reason == "repeated_line_loop" and finish.detail == "same line again"
    assert not sched.has_work() and sched.stats()["pages_used"] == 0
    assert sched.stats()["finished_repeated_line_loop"] == 1
