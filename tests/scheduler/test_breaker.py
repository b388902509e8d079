"""The circuit breaker over pipelines, on a clock the test moves: failures in a window open it,
a cool-down later a probe may close it, a failed probe doubles the cool-down, and a pipeline much
slower than the best other one is taken out too."""

from __future__ import annotations

import pytest

from services.scheduler.pipelines.breaker import CLOSED, HALF_OPEN, OPEN, BreakerConfig, Breakers

CFG = BreakerConfig(failures=3, window_s=10.0, cooldown_s=5.0, max_cooldown_s=12.0,
                    slow_factor=3.0, slow_samples=4, smoothing=0.5)


def test_failures_within_the_window_open_it_and_older_ones_do_not_count():
    b = Breakers(CFG)
    b.failure("p0", 0.0)
    b.failure("p0", 1.0)
    b.failure("p0", 11.5, "peer dead")       # the first two are older than the window
    assert b.state("p0", 11.5) == CLOSED
    b.failure("p0", 12.0)
    assert b.state("p0", 12.0) == CLOSED
    b.failure("p0", 12.5, "peer dead")
    assert b.state("p0", 12.5) == OPEN and not b.slow("p0")
    assert "3 failed batches within 10 s" in b.why("p0") and "peer dead" in b.why("p0")
    assert b.info("p0", 13.5)["back_in_s"] == 4.0


def test_after_the_cool_down_a_served_probe_closes_it():
    b = Breakers(CFG)
    for t in (0.0, 0.1, 0.2):
        b.failure("p0", t)
    assert b.state("p0", 5.1) == OPEN
    assert b.state("p0", 5.2) == HALF_OPEN
    b.success("p0", 5.3)
    assert b.state("p0", 5.3) == CLOSED and b.why("p0") == ""
    b.failure("p0", 5.4)                      # the old failures were forgotten
    assert b.state("p0", 5.4) == CLOSED


def test_a_failed_probe_opens_it_again_for_twice_as_long_up_to_the_cap():
    b = Breakers(CFG)
    for t in (0.0, 0.1, 0.2):
        b.failure("p0", t)
    b.failure("p0", 6.0, "timeout")           # half-open: one failure is enough
    assert b.state("p0", 6.0) == OPEN and "probe failed" in b.why("p0")
    assert b.state("p0", 15.9) == OPEN and b.state("p0", 16.0) == HALF_OPEN   # 10 s
    b.failure("p0", 16.0)
    assert b.state("p0", 27.9) == OPEN and b.state("p0", 28.0) == HALF_OPEN   # 12 s, the cap
    assert b.info("p0", 28.0)["opens"] == 3


def test_a_pipeline_much_slower_than_the_best_other_is_taken_out_and_only_it():
    b = Breakers(CFG)
    for i in range(4):
        b.success("p0", float(i), step_s=0.010)
        b.success("p1", float(i), step_s=0.020)   # 2x: slower, but not much slower
        b.success("p2", float(i), step_s=0.040)
    assert b.state("p1", 4.0) == CLOSED
    assert b.state("p2", 4.0) == OPEN and b.slow("p2")
    assert "40.0 ms per decode step against 10.0 ms" in b.why("p2")
    assert b.state("p0", 4.0) == CLOSED


def test_alone_a_slow_pipeline_is_never_compared_and_too_few_steps_judge_nothing():
    b = Breakers(CFG)
    for i in range(10):
        b.success("p0", float(i), step_s=1.0)
    assert b.state("p0", 10.0) == CLOSED
    for i in range(3):
        b.success("p1", float(i), step_s=0.01)
    b.success("p0", 11.0, step_s=1.0)
    assert b.state("p0", 11.0) == CLOSED      # p1 has 3 steps: not yet a measure
    b.success("p1", 12.0, step_s=0.01)
    b.success("p0", 12.0, step_s=1.0)
    assert b.state("p0", 12.0) == OPEN


def test_a_slow_pipeline_probed_again_is_judged_on_fresh_steps():
    b = Breakers(CFG)
    for i in range(4):
        b.success("p0", float(i), step_s=0.01)
        b.success("p1", float(i), step_s=0.1)
    assert b.state("p1", 4.0) == OPEN
    b.success("p1", 9.0, step_s=0.012)        # half-open: it serves at the others' pace now
    assert b.state("p1", 9.0) == CLOSED
    for i in range(4):
        b.success("p1", 10.0 + i, step_s=0.012)
    assert b.state("p1", 14.0) == CLOSED


@pytest.mark.parametrize("bad", [dict(failures=0), dict(window_s=0), dict(slow_factor=1.0),
                                 dict(smoothing=0), dict(slow_samples=0)])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        BreakerConfig(**bad)
