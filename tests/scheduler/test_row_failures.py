"""A row the last shard could not sample fails its own request with the reason; the other
requests of the batch get their tokens and go on."""

import numpy as np
import pytest

import wire
from services.scheduler.batching import BadCompletion, SampledToken, Scheduler
from services.scheduler.pipelines.driver import Driver
from services.scheduler.pipelines.streams import RequestStream
from wire.messages.sampling import SamplingParams
from wire.messages.shard import ForwardResult

from .harness import req, small


def two_decoding(sched: Scheduler):
    """Two requests whose prompts fit one batch, so its plan samples both."""
    sched.submit(req("a", n=3, max_tokens=5))
    sched.submit(req("b", n=3, max_tokens=5, first=20))
    plan = sched.schedule()
    assert [c.sample for c in plan.chunks] == [True, True]
    return plan


def test_a_failed_row_ends_its_request_with_the_reason_and_frees_its_pages():
    sched = Scheduler(small())
    plan = two_decoding(sched)
    outs = sched.complete(plan.batch_id, {"b": SampledToken(7)}, {"a": "bad_logits: NaN"})
    by_id = {o.request_id: o for o in outs}
    assert by_id["a"].finish.reason == "failed" and by_id["a"].finish.detail == "bad_logits: NaN"
    assert by_id["a"].token_id is None
    assert by_id["b"].token_id == 7 and by_id["b"].finish is None
    assert not sched.is_tracked("a") and sched.is_tracked("b")
    sched.check()
    assert sched.stats()["finished_failed"] == 1
    plan = sched.schedule()                                  # b decodes on, alone
    assert [c.request_id for c in plan.chunks] == ["b"]


@pytest.mark.parametrize("samples, failures", [
    ({"a": SampledToken(1)}, {"a": "x", "b": "y"}),          # a both sampled and failed
    ({}, {"a": "x"}),                                        # b has neither
    ({"a": SampledToken(1)}, {"b": ""}),                     # a failure must say why
    ({"a": SampledToken(1)}, {"ghost": "x", "b": "y"}),      # no such sequence in the batch
])
def test_complete_refuses_failures_that_do_not_match_the_plan_and_applies_nothing(samples, failures):
    sched = Scheduler(small())
    plan = two_decoding(sched)
    with pytest.raises(BadCompletion):
        sched.complete(plan.batch_id, samples, failures)
    assert sched.is_tracked("a") and sched.is_tracked("b") and plan.batch_id in sched.inflight


def driver_over(sched: Scheduler, plan):
    streams = {c.request_id: RequestStream(c.request_id, len(c.token_ids),
                                           SamplingParams(temperature=0.0, top_logprobs=2))
               for c in plan.chunks}
    return Driver(sched, streams, call=None, chain=lambda: None), streams


def reply(plan, errors, tokens=(4, 9)):
    n = len(tokens)
    return ForwardResult(batch_id=plan.batch_id, key=0, tokens=wire.Tensor(np.array(tokens, np.int32)),
                        logprobs=wire.Tensor(np.full(n, -0.5, np.float32)),
                        top_ids=wire.Tensor(np.array([[4, 5], [9, 8]][:n], np.int32)),
                        top_logprobs=wire.Tensor(np.full((n, 2), -0.5, np.float32)), errors=errors)


def test_the_driver_fails_exactly_the_rows_the_shard_could_not_sample():
    sched = Scheduler(small())
    plan = two_decoding(sched)
    driver, streams = driver_over(sched, plan)
    driver._batch_done(plan, reply(plan, ["", "internal: RuntimeError: boom"]), 0.01)
    (a,) = [streams["a"].events.get_nowait()]
    assert a.output.token_id == 4 and a.output.text == "w4 " and a.top_ids == [4, 5]
    (b,) = [streams["b"].events.get_nowait()]
    assert b.output.finish.reason == "failed"
    assert b.output.finish.detail == "the last shard could not sample it: internal: RuntimeError: boom"
    assert streams["a"].events.empty() and streams["b"].events.empty()
    assert sched.is_tracked("a") and not sched.is_tracked("b")
    assert driver.counters["rows_failed"] == 1 and driver.counters["batches_done"] == 1


def test_a_reply_with_too_few_errors_is_malformed_and_changes_nothing():
    sched = Scheduler(small())
    plan = two_decoding(sched)
    driver, streams = driver_over(sched, plan)
    with pytest.raises(ValueError):
        driver._batch_done(plan, reply(plan, ["bad_logits: NaN"]), 0.01)
    assert plan.batch_id in sched.inflight and sched.is_tracked("a") and sched.is_tracked("b")
    assert streams["a"].completion_tokens == 0 and streams["b"].completion_tokens == 0
