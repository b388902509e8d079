"""Request deadlines: declared on the wire as seconds from arrival, checked at admission, and a
request past its deadline ends failed with reason deadline, its pages freed, others untouched."""

import math

import pytest

from services.scheduler.batching import BadRequest, Scheduler
from wire.messages.scheduler import Generate

from .harness import ManualClock, req, run_to_end, small, step


def test_a_request_past_its_deadline_ends_failed_with_reason_deadline_and_frees_its_pages():
    clock = ManualClock()
    sched = Scheduler(small(), clock=clock)
    sched.submit(req("a", first=10, max_tokens=8, deadline_s=5.0))
    sched.submit(req("b", first=30, max_tokens=8))
    step(sched)
    step(sched)
    clock.t += 4.9
    assert sched.expire() == [] and sched.next_deadline() == pytest.approx(1005.0)
    clock.t += 0.2
    (out,) = sched.expire()
    assert out.request_id == "a" and out.finish.reason == "failed"
    assert out.finish.detail == "deadline: 5 s passed with 2 of 8 tokens generated"
    assert not sched.is_tracked("a") and sched.next_deadline() is None
    sched.check()
    outs = run_to_end(sched)                       # b goes on to its length
    assert outs["b"][-1].finish.reason == "length"
    assert sched.stats()["pages_used"] == 0


def test_a_waiting_request_past_its_deadline_ends_too():
    clock = ManualClock()
    sched = Scheduler(small(max_inflight=1), clock=clock)
    sched.submit(req("a", first=10, deadline_s=1.0))
    clock.t += 1.0
    assert [o.finish.detail.split(":")[0] for o in sched.expire()] == ["deadline"]
    assert not sched.has_work()
    sched.check()


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "5"])
def test_a_deadline_that_is_not_a_positive_number_is_refused_by_name(bad):
    sched = Scheduler(small())
    with pytest.raises(BadRequest) as e:
        sched.submit(req("a", deadline_s=bad))
    assert e.value.reason == "bad_deadline" and "deadline_s" in str(e.value)
    assert not sched.has_work()


def test_a_deadline_past_a_week_is_a_clients_bug_refused_at_admission():
    sched = Scheduler(small())
    with pytest.raises(BadRequest, match="deadline_s"):
        sched.submit(req("a", deadline_s=8 * 24 * 3600.0))
    sched.submit(req("b", deadline_s=0.5))


def test_the_wire_takes_a_deadline_in_seconds_and_leaves_its_range_to_admission():
    Generate(prompt="hi", deadline_s=0.5).check()
    Generate(prompt="hi").check()
    Generate(prompt="hi", deadline_s=-1.0).check()      # admission refuses it, by name
