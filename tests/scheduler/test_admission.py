"""Bad requests get a typed error; a full queue refuses at once with a retry-after estimate."""

import pytest

from services.scheduler.batching import (BadMaxTokens, BadRequestId, BadSampling, BadSeed, BadStopStrings,
                                BadTokenIds, ConfigError, DuplicateRequest, EmptyPrompt,
                                PromptTooLong, QueueFull, Request, SampledToken, Scheduler,
                                UnknownPriority, check_sampling)
from wire.messages.sampling import SamplingParams

from .harness import ManualClock, req, small, step


@pytest.mark.parametrize("request_, error", [
    (Request("r", (), 4), EmptyPrompt),
    (Request("r", (1, -2), 4), BadTokenIds),
    (Request("r", (1, 1.5), 4), BadTokenIds),
    (Request("r", (1, 50_000), 4), BadTokenIds),
    (Request("r", (1, 2), 0), BadMaxTokens),
    (Request("r", (1, 2), -5), BadMaxTokens),
    (Request("r", (1, 2), 10**9), BadMaxTokens),
    (Request("r", (1, 2), True), BadMaxTokens),
    (Request("r", (1, 2), 4, priority="urgent"), UnknownPriority),
    (Request("r", (1, 2), 4, stop=("",)), BadStopStrings),
    (Request("r", (1, 2), 4, stop="END"), BadStopStrings),
    (Request("r", (1, 2), 4, stop=("x",) * 17), BadStopStrings),
    (Request("r", (1, 2), 4, seed="7"), BadSeed),
    (Request("", (1, 2), 4), BadRequestId),
    (Request("r" * 257, (1, 2), 4), BadRequestId),
    (Request("r", tuple(range(1, 65)), 4), PromptTooLong),
    # Told by its length before any id is read (a list of 10^6 ids took the loop a second).
    (Request("r", (-1,) * 10**6, 4), PromptTooLong),
])
def test_bad_requests_get_a_typed_error_and_are_not_queued(request_, error):
    sched = Scheduler(small(vocab_size=49152))
    with pytest.raises(error) as info:
        sched.submit(request_)
    assert info.value.reason in str(info.value)
    assert not sched.has_work()


def test_prompt_that_fits_but_max_tokens_does_not_is_clamped_and_says_so():
    sched = Scheduler(small())
    terms = sched.submit(req("r", n=60, max_tokens=100))
    assert terms.max_tokens == 4 and terms.clamped and "clamped to 4" in terms.note
    assert not sched.submit(req("s", n=10, max_tokens=54)).clamped


def test_prompt_filling_the_whole_context_is_refused():
    with pytest.raises(PromptTooLong) as info:
        Scheduler(small()).submit(req("r", n=64))
    assert info.value.prompt_tokens == 64 and info.value.context_length == 64


def test_duplicate_request_id_is_refused_while_the_first_runs():
    sched = Scheduler(small())
    sched.submit(req("r"))
    with pytest.raises(DuplicateRequest):
        sched.submit(req("r"))


def test_full_queue_refuses_with_retry_after_from_measured_throughput():
    clock = ManualClock()
    sched = Scheduler(small(max_queue=3, max_batch_tokens=16, retry_after_min_s=0.5), clock)
    sched.submit(req("warm", n=16, max_tokens=1))
    plan = sched.schedule()
    clock.t += 0.1                                   # 16 tokens in 0.1 s: 160 tokens/s
    sched.complete(plan.batch_id, {"warm": SampledToken(5)})
    for i in range(3):
        sched.submit(req(f"q{i}", n=20, max_tokens=12))   # 32 tokens of work each
    with pytest.raises(QueueFull) as info:
        sched.submit(req("late"))
    assert info.value.retry_after == pytest.approx(3 * 32 / 160)
    assert info.value.queued == 3
    assert not sched.is_tracked("late")


def test_retry_after_has_a_floor_and_a_ceiling():
    sched = Scheduler(small(max_queue=1, assumed_tokens_per_s=1e9, retry_after_min_s=2.0))
    sched.submit(req("a"))
    with pytest.raises(QueueFull) as info:
        sched.submit(req("b"))
    assert info.value.retry_after == 2.0
    sched = Scheduler(small(max_queue=1, assumed_tokens_per_s=1e-6, retry_after_max_s=60.0))
    sched.submit(req("a"))
    with pytest.raises(QueueFull) as info:
        sched.submit(req("b"))
    assert info.value.retry_after == 60.0


def test_queue_frees_up_as_requests_are_admitted():
    sched = Scheduler(small(max_queue=1))
    sched.submit(req("a"))
    step(sched)
    sched.submit(req("b"))


@pytest.mark.parametrize("kw", [dict(num_pages=0), dict(context_length=1000),
                                dict(loop_repeats=1), dict(loop_window=2, loop_repeats=4),
                                dict(retry_after_min_s=10.0, retry_after_max_s=1.0)])
def test_bad_config_is_refused_when_built(kw):
    with pytest.raises(ConfigError):
        small(**kw)


def test_throughput_is_measured_over_busy_time_not_idle_time():
    from services.scheduler.batching.throughput import Throughput
    meter = Throughput(window_s=10.0)
    assert meter.rate(0.0) is None
    meter.started(100.0)
    meter.record(101.0, 50)
    meter.record(102.0, 50)
    assert meter.rate(102.0) == 50.0
    assert meter.rate(113.0) is None             # everything aged out of the window
    meter.started(500.0)                         # busy again after a long idle spell
    meter.record(500.5, 100)
    assert meter.rate(500.5) == 200.0


@pytest.mark.parametrize("field, value", [
    ("top_k", 2**63), ("top_k", 2**31), ("top_k", -1), ("top_k", True),
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", -0.5),
    ("top_p", 0.0), ("min_p", float("-inf")), ("repetition_penalty", 0.0),
    ("presence_penalty", 2.01), ("frequency_penalty", float("nan")),
    ("seed", -1), ("seed", 2**64), ("seed", 3.0), ("top_logprobs", 21), ("top_logprobs", True),
])
def test_sampling_out_of_range_is_refused_at_admission_naming_the_field(field, value):
    with pytest.raises(BadSampling) as info:
        check_sampling(SamplingParams(**{field: value}))
    assert info.value.reason == "bad_sampling"
    assert f"sampling parameter {field}=" in str(info.value) and "must be" in str(info.value)


def test_admitted_sampling_has_its_seed_fixed_once():
    p = check_sampling(SamplingParams(temperature=0.7, top_k=2**31 - 1))
    assert p.seed is not None and p.top_k == 2**31 - 1
    assert check_sampling(SamplingParams(seed=9)).seed == 9
    with pytest.raises(BadSampling):
        check_sampling({"temperature": 0.7})
