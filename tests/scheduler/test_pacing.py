"""Prefill pacing: the cost fit, the budget it gives, and the policy cutting prefill chunks by time
while streams decode or a first token is on its way (and only then), with the same tokens whatever the chunking."""

import pytest
from hypothesis import given, strategies as st

from services.scheduler.batching import Scheduler
from services.scheduler.batching.pacing import Cost, StepCost, fit, prefill_budget

from .harness import ManualClock, req, run_to_end, samples_for, small, step


# ---- the fit --------------------------------------------------------------------------------

def test_fit_recovers_a_linear_cost_exactly():
    # 5 ms a batch plus 2 ms a token, derived by hand for each size.
    cost = fit([(n, 0.005 + 0.002 * n) for n in (1, 8, 33, 100)])
    assert cost.fixed_s == pytest.approx(0.005) and cost.per_token_s == pytest.approx(0.002)
    assert cost.seconds(50) == pytest.approx(0.105)


def test_fit_of_one_batch_size_counts_the_fixed_part_in_every_token():
    cost = fit([(4, 0.020), (4, 0.024)])
    assert cost == Cost(0.0, pytest.approx(0.022 / 4))


def test_a_fit_saying_bigger_batches_are_cheaper_falls_back_to_the_mean_per_token():
    cost = fit([(1, 0.050), (100, 0.010)])   # noise: a stalled small batch
    assert cost.fixed_s == 0.0 and cost.per_token_s == pytest.approx(0.060 / 101)


def test_no_samples_no_fit():
    assert fit([]) is None and StepCost().estimate() is None


def test_the_pipeline_step_is_the_sum_of_its_shards():
    sc = StepCost()
    for n in (1, 10, 50):
        sc.record({"a": 0.001 + 0.001 * n, "b": 0.002 + 0.003 * n}, n)
    est = sc.estimate()
    assert est.fixed_s == pytest.approx(0.003) and est.per_token_s == pytest.approx(0.004)


def test_a_shard_that_left_the_route_no_longer_counts():
    sc = StepCost()
    sc.record({"old": 1.0, "b": 0.01}, 10)
    sc.record({"new": 0.02, "b": 0.01}, 10)
    assert sc.estimate().per_token_s == pytest.approx(0.003)


def test_the_window_keeps_only_recent_batches():
    sc = StepCost(window=3)
    for _ in range(3):
        sc.record({"a": 1.0}, 10)        # a slow past
    for _ in range(3):
        sc.record({"a": 0.01}, 10)
    assert sc.estimate().per_token_s == pytest.approx(0.001)


# ---- the budget -----------------------------------------------------------------------------

def test_budget_keeps_the_predicted_step_within_the_target():
    cost = Cost(0.010, 0.005)                # (0.12 - 0.01) / 0.005 = 22 tokens a step
    assert prefill_budget(cost, decodes=4, budget=512, step_s=0.12, min_chunk=8) == 18
    assert cost.seconds(4 + 18) <= 0.12 < cost.seconds(4 + 19)


def test_budget_never_below_the_floor_nor_above_what_is_left():
    cost = Cost(0.010, 0.005)
    assert prefill_budget(cost, decodes=40, budget=512, step_s=0.12, min_chunk=8) == 8
    assert prefill_budget(cost, decodes=4, budget=5, step_s=0.12, min_chunk=8) == 5
    assert prefill_budget(Cost(0.0, 1e-6), decodes=4, budget=300, step_s=0.12, min_chunk=8) == 300


def test_prefill_already_in_flight_counts_against_the_step():
    cost = Cost(0.010, 0.005)                # 22 tokens a step: 4 decodes, 10 in flight, 8 left
    assert prefill_budget(cost, decodes=4, budget=512, step_s=0.12, min_chunk=2,
                          prefill_in_flight=10) == 8
    # a step's worth already in flight: only the floor
    assert prefill_budget(cost, decodes=4, budget=512, step_s=0.12, min_chunk=2,
                          prefill_in_flight=40) == 2


def test_unmeasured_means_unpaced():
    assert prefill_budget(None, decodes=4, budget=512, step_s=0.12, min_chunk=8) == 512


@given(fixed=st.floats(0, 0.05), per=st.floats(1e-5, 0.05), decodes=st.integers(0, 64),
       budget=st.integers(0, 1024), floor=st.integers(1, 64))
def test_budget_bounds(fixed, per, decodes, budget, floor):
    n = prefill_budget(Cost(fixed, per), decodes, budget, 0.12, floor)
    assert 0 <= n <= budget
    assert n >= min(floor, budget)
    if n > floor:   # above the floor only when the whole step still fits the target
        assert Cost(fixed, per).seconds(decodes + n) <= 0.12 + 1e-9


# ---- the policy -----------------------------------------------------------------------------

def _measured(sched, per_token_s=0.01):
    """Tell the policy its one shard costs `per_token_s` a token, nothing fixed."""
    for n in (1, 20, 60):
        sched.record_step({"s0": per_token_s * n}, n)


def test_prefill_is_cut_to_the_pace_while_a_stream_decodes():
    # 10 ms a token, 0.12 s a step: 12 tokens, one of them the decode.
    sched = Scheduler(small(max_batch_tokens=48, pace_step_s=0.12, pace_min_chunk=4,
                            num_pages=64, context_length=128))
    _measured(sched)
    sched.submit(req("streaming", n=4, max_tokens=20))
    step(sched)                                   # its prompt, unpaced: nothing decodes yet
    sched.submit(req("long", n=100, first=200, max_tokens=2))
    plan, _ = step(sched)
    sizes = {c.request_id: len(c.token_ids) for c in plan.chunks}
    assert sizes == {"streaming": 1, "long": 11}


def test_a_batch_in_flight_with_prefill_leaves_the_next_one_less():
    # 10 ms a token, 0.12 s a step: the first paced batch takes 11 prompt tokens beside the
    # decode; while it is out, the next (the other prompt's) may take 12 - 11 = 1: the floor, 4.
    sched = Scheduler(small(max_batch_tokens=48, pace_step_s=0.12, pace_min_chunk=4,
                            num_pages=64, context_length=128, max_inflight=2))
    _measured(sched)
    sched.submit(req("streaming", n=4, max_tokens=20))
    step(sched)
    sched.submit(req("long", n=100, first=200, max_tokens=2))
    sched.submit(req("other", n=100, first=400, max_tokens=2))
    first = sched.schedule()
    assert {c.request_id: len(c.token_ids) for c in first.chunks} == {"streaming": 1, "long": 11}
    second = sched.schedule()                     # the first still in flight
    assert {c.request_id: len(c.token_ids) for c in second.chunks} == {"other": 4}
    sched.complete(first.batch_id, samples_for(first))
    sched.complete(second.batch_id, samples_for(second))
    third = sched.schedule()                      # nothing in flight again: the step's 11
    assert {c.request_id: len(c.token_ids) for c in third.chunks} == {"streaming": 1, "long": 11}


def test_a_first_token_on_its_way_paces_the_prefill_planned_behind_it():
    # "first"'s whole prompt is out and samples: it streams before the next batch is back, so that
    # batch keeps the pace. 10 ms a token, 0.12 s a step: 12 tokens, 4 of them already out.
    sched = Scheduler(small(max_batch_tokens=48, pace_step_s=0.12, pace_min_chunk=4,
                            num_pages=64, context_length=128, max_inflight=2))
    _measured(sched)
    sched.submit(req("first", n=4, max_tokens=20))
    out = sched.schedule()                        # unpaced: nothing streams or is about to
    assert {c.request_id: len(c.token_ids) for c in out.chunks} == {"first": 4}
    sched.submit(req("long", n=100, first=200, max_tokens=2))
    behind = sched.schedule()
    assert {c.request_id: len(c.token_ids) for c in behind.chunks} == {"long": 8}


def test_a_prompt_chunk_out_that_does_not_sample_leaves_the_next_unpaced():
    sched = Scheduler(small(max_batch_tokens=48, pace_step_s=0.12, pace_min_chunk=4,
                            num_pages=64, context_length=128, max_inflight=2))
    _measured(sched)
    sched.submit(req("long", n=100, max_tokens=2))
    out = sched.schedule()
    assert [c.sample for c in out.chunks] == [False]
    sched.submit(req("other", n=100, first=200, max_tokens=2))
    behind = sched.schedule()
    assert {c.request_id: len(c.token_ids) for c in behind.chunks} == {"other": 48}


def test_nothing_decoding_means_the_whole_budget():
    sched = Scheduler(small(max_batch_tokens=48, pace_step_s=0.12, pace_min_chunk=4,
                            num_pages=64, context_length=128))
    _measured(sched)
    sched.submit(req("long", n=100, max_tokens=2))
    plan, _ = step(sched)
    assert len(plan.chunks[0].token_ids) == 48


def test_waiting_requests_advance_by_the_floor_when_decodes_fill_the_step():
    sched = Scheduler(small(max_batch_tokens=48, pace_step_s=0.12, pace_min_chunk=4,
                            num_pages=64, context_length=128))
    _measured(sched, per_token_s=1.0)             # even one decode is past the target
    sched.submit(req("streaming", n=4, max_tokens=20))
    step(sched)
    sched.submit(req("long", n=100, first=200, max_tokens=2))
    plan, _ = step(sched)
    assert [len(c.token_ids) for c in plan.chunks] == [1, 4]


def test_paced_chunks_give_the_same_tokens_as_unpaced():
    def answers(paced: bool):
        sched = Scheduler(small(max_batch_tokens=48, pace_step_s=0.05, pace_min_chunk=3,
                                num_pages=64, context_length=128, max_batch_seqs=8))
        if paced:
            _measured(sched)
        sched.submit(req("a", n=5, max_tokens=12))
        step(sched)
        for i in range(3):
            sched.submit(req(f"p{i}", n=40 + 7 * i, first=100 + 60 * i, max_tokens=6))
        return {rid: [o.token_id for o in outs if o.token_id is not None]
                for rid, outs in run_to_end(sched).items()}, sched.stats()["batches"]

    (paced, n_paced), (plain, n_plain) = answers(True), answers(False)
    assert paced == plain
    assert n_paced > n_plain       # the prompts really were cut into more, smaller chunks


def test_a_request_waiting_past_the_limit_for_its_first_token_is_not_paced():
    cost = Cost(0.010, 0.005)
    assert prefill_budget(cost, 4, 512, 0.12, 8, waited_s=3.0, max_wait_s=10.0) == 18
    assert prefill_budget(cost, 4, 512, 0.12, 8, waited_s=10.5, max_wait_s=10.0) == 512


def test_the_policy_stops_pacing_once_a_request_has_waited_too_long():
    clock = ManualClock()
    sched = Scheduler(small(max_batch_tokens=48, pace_step_s=0.12, pace_min_chunk=4,
                            pace_max_wait_s=5.0, num_pages=64, context_length=128), clock=clock)
    _measured(sched)
    sched.submit(req("streaming", n=4, max_tokens=20))
    step(sched)
    sched.submit(req("long", n=100, first=200, max_tokens=2))
    plan, _ = step(sched)
    assert [len(c.token_ids) for c in plan.chunks] == [1, 11]      # paced
    clock.t += 6.0                                                 # "long" still has no token
    plan, _ = step(sched)
    assert [len(c.token_ids) for c in plan.chunks] == [1, 47]      # the whole budget


# ---- streams paused by a loss -----------------------------------------------------------------

def _paused_beside_a_stream(**config):
    """A policy whose one shard costs 10 ms a token (12 tokens a 0.12 s step), one stream
    decoding, and behind it continuations: two requests carried from a lost scheduler with 20
    tokens each already sent, and a new prompt."""
    sched = Scheduler(small(max_batch_tokens=64, pace_step_s=0.12, pace_min_chunk=4,
                            max_refill_tokens=40, num_pages=64, context_length=128, **config))
    _measured(sched)
    sched.submit(req("streaming", n=4, max_tokens=30))
    step(sched)
    for i, rid in enumerate(("carried-a", "carried-b")):
        sched.submit(req(rid, n=10, first=100 + 20 * i, max_tokens=30,
                         generated=tuple(range(40, 60))))
    sched.submit(req("new", n=30, first=200, max_tokens=2))
    return sched


def test_continuations_come_back_at_the_refill_pace_not_cut_to_the_step():
    sched = _paused_beside_a_stream()
    sizes = [{c.request_id: len(c.token_ids) for c in step(sched)[0].chunks} for _ in range(2)]
    # Each 30 tokens long: the first whole and 10 of the second, then the rest of the second
    # (40 refill tokens a batch; the step's pace would give 11). The new prompt waits: the
    # recoveries took more than the step's pace.
    assert sizes[0] == {"streaming": 1, "carried-a": 30, "carried-b": 10}
    assert sizes[1] == {"streaming": 1, "carried-a": 1, "carried-b": 20}


def test_a_continuation_decodes_as_any_stream_once_back():
    sched = _paused_beside_a_stream()
    step(sched)
    step(sched)
    plan, _ = step(sched)
    sizes = {c.request_id: len(c.token_ids) for c in plan.chunks}
    # Back, both only decode; the new prompt is paced: 12 tokens a step, 3 of them decodes.
    assert sizes == {"streaming": 1, "carried-a": 1, "carried-b": 1, "new": 9}


def test_a_shard_loss_refill_is_not_cut_to_the_step_either():
    sched = Scheduler(small(max_batch_tokens=64, pace_step_s=0.12, pace_min_chunk=4,
                            max_refill_tokens=40, num_pages=64, context_length=128))
    _measured(sched)
    for rid, first in (("a", 10), ("b", 50)):
        sched.submit(req(rid, n=30, first=first, max_tokens=30))
    step(sched)
    step(sched)                                   # both decode: 32 tokens each
    sched.reset_for_recovery()
    sizes = [{c.request_id: len(c.token_ids) for c in step(sched)[0].chunks} for _ in range(2)]
    # "a" back whole and 8 of "b"; then "b"'s other 24 beside "a"'s decode (the pace: 11).
    assert sizes == [{"a": 32, "b": 8}, {"a": 1, "b": 24}]
