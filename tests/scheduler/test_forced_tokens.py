"""Tokens a grammar forces are taken without a draw each: the policy appends them as generated,
through the stop rules, and the request's next batch computes them as one chunk that samples
after them."""

from services.scheduler.batching import SampledToken, Scheduler

from .harness import ManualClock, req, small, step


def test_forced_tokens_go_in_as_one_chunk_and_sampling_goes_on_after_them():
    s = Scheduler(small(), clock=ManualClock())
    s.submit(req("a", n=6, max_tokens=10))
    plan, outs = step(s)                          # the prompt, and the first drawn token
    assert [o.token_id for o in outs] == [outs[0].token_id]
    forced = s.force("a", [5, 6, 7])
    assert [(o.token_id, o.text, o.logprob) for o in forced] == [
        (5, "w5 ", 0.0), (6, "w6 ", 0.0), (7, "w7 ", 0.0)]
    assert s.generated("a") == [outs[0].token_id, 5, 6, 7]
    plan, outs = step(s)
    (chunk,) = plan.chunks
    # The drawn token's KV and the three forced ones: one chunk of four, sampling at its end.
    assert len(chunk.token_ids) == 4 and chunk.token_ids[1:] == (5, 6, 7) and chunk.sample
    assert chunk.step == 4 and len(outs) == 1
    s.check()


def test_forced_tokens_stop_at_max_tokens_and_a_busy_request_takes_none():
    s = Scheduler(small(), clock=ManualClock())
    s.submit(req("a", n=6, max_tokens=3))
    plan = s.schedule()
    assert s.force("a", [5]) == []                # in flight: its next token is not yet known
    s.complete(plan.batch_id, {"a": SampledToken(9)})
    forced = s.force("a", [5, 6, 7])
    assert [o.token_id for o in forced] == [5, 6]  # the third generated token is the last
    assert forced[-1].finish is not None and forced[-1].finish.reason == "length"
    assert not s.is_tracked("a") and s.force("a", [8]) == []
    s.check()
