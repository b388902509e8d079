"""The driver with the real policy and a fake pipeline: how each request ends when shards
restart, refuse batches, answer garbage, or raise what nobody expected."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import wire
from bus.errors import CallTimeout, PeerDead, PeerRestarted, RemoteError
from services.scheduler.batching import Scheduler
from services.scheduler.pipelines.driver import MASKS_OFF_LOOP, Driver
from services.scheduler.pipelines.chains import Stage
from services.scheduler.pipelines.streams import RequestStream
from wire.failures import TABLE
from wire.messages.sampling import SamplingParams
from wire.messages.shard import ForwardResult, Hop

from .harness import ManualClock, req, small

GUILTY_TOP_K = 13   # a sampling row the fake last shard refuses, as a real one refuses bad params


def sampled_token(tokens: np.ndarray, positions: np.ndarray) -> int:
    """The fake sampler: a function of the row's last token and position, never EOS (0)."""
    return 1 + int(tokens[-1] * 7 + positions[-1] * 3) % 97


class FakePipeline:
    """Two stages; `call` answers like the last shard unless a test scripts something else."""

    def __init__(self):
        self.epochs = [1, 1]
        self.gap = False
        self.forwards = []             # every Forward sent, in order
        self.script = []               # callables run instead of the sampler, one per call
        self.refuse_guilty = False
        self.hops = []                 # every answer's stage figures

    def chain(self):
        if self.gap:
            return None
        return [Stage(f"shard-{i}", e, 15 * i, 15 * (i + 1), 32, 4) for i, e in enumerate(self.epochs)]

    async def call(self, shard, body, timeout):
        assert shard == "shard-0"
        self.forwards.append(body)
        await asyncio.sleep(0)         # a round trip: other tasks run meanwhile
        if self.script:
            return self.script.pop(0)(body)
        if self.refuse_guilty and any(s.top_k == GUILTY_TOP_K for s in body.sampling):
            raise RemoteError("bad_sampling", f"top_k {GUILTY_TOP_K} is refused", peer="shard-1")
        return answer(body, hops=list(self.hops)) if self.hops else answer(body)


def rows(body):
    """(tokens, positions) of every row of a Forward."""
    lens = body.query_lens
    cuts = np.cumsum(lens)[:-1]
    return list(zip(np.split(body.tokens.array(), cuts), np.split(np.array(body.positions), cuts)))


def answer(body, **override):
    want = body.want_logits.array() if body.want_logits is not None else None
    ids = [sampled_token(t, p) for i, (t, p) in enumerate(rows(body)) if want is None or want[i]]
    fields = dict(batch_id=body.batch_id, key=0, tokens=wire.Tensor(np.array(ids, np.int32)),
                  logprobs=wire.Tensor(np.full(len(ids), -0.5, np.float32)))
    fields.update(override)
    return ForwardResult(**fields)


class Rig:
    """A policy, its streams and a driver over a FakePipeline, run by a real event loop."""

    def __init__(self, budget=300.0, **config):
        self.clock = ManualClock()
        self.pipe = FakePipeline()
        self.policy = Scheduler(small(**{"max_inflight": 2, **config}), clock=self.clock)
        self.requests: dict[str, RequestStream] = {}
        self.driver = Driver(self.policy, self.requests, self.pipe.call, self.pipe.chain,
                             backoff=(1.0, 4.0), poll_s=0.005, clock=self.clock,
                             unserved_budget_s=budget, describe_gap=lambda: "layers 15-30 gone")
        self.events: dict[str, list] = {}

    def submit(self, rid, n=5, first=1, max_tokens=4, top_k=0, penalized=False, deadline_s=None,
               constraint=None):
        self.policy.submit(req(rid, n=n, first=first, max_tokens=max_tokens, deadline_s=deadline_s))
        sampling = SamplingParams(temperature=0.0, top_k=top_k,
                                  repetition_penalty=1.3 if penalized else 1.0)
        self.requests[rid] = RequestStream(rid, n, sampling, constraint=constraint)
        self.driver.wake.set()

    def _drain(self):
        for rid, stream in self.requests.items():
            while not stream.events.empty():
                self.events.setdefault(rid, []).append(stream.events.get_nowait().output)

    def finish(self, rid):
        self._drain()
        outs = self.events.get(rid, [])
        return outs[-1].finish if outs and outs[-1].finish is not None else None

    def tokens(self, rid):
        self._drain()
        return [o.token_id for o in self.events.get(rid, []) if o.token_id is not None]

    async def until(self, cond, what, timeout=10.0):
        deadline = asyncio.get_running_loop().time() + timeout
        while not cond():
            assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.002)

    async def run_until_all_finish(self):
        await self.until(lambda: all(self.finish(r) for r in self.requests), "every request to end")

    def assert_nothing_left(self):
        stats = self.policy.stats()
        assert self.policy.inflight == () and not self.policy.has_work()
        assert stats["pages_used"] == 0 and stats["inflight_batches"] == 0
        self.policy.check()


@pytest.fixture
async def rig():
    made = []

    def make(**config):
        r = Rig(**config)
        made.append((r, asyncio.get_running_loop().create_task(r.driver.run())))
        return r

    yield make
    for r, task in made:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await r.driver.stop()


def prompt(first, n=5):
    return list(range(first, first + n))


async def test_tokens_flow_and_every_request_ends_with_its_length(rig):
    r = rig()
    for i, rid in enumerate("abc"):
        r.submit(rid, first=10 + 20 * i, max_tokens=3 + i)
    await r.run_until_all_finish()
    for i, rid in enumerate("abc"):
        assert r.finish(rid).reason == "length" and len(r.tokens(rid)) == 3 + i
    r.assert_nothing_left()


async def test_decode_steps_are_timed_by_their_rows_and_each_shards_compute(rig):
    # What bench/simulate.py checks a run by: each shard's compute of a decode step of b rows.
    r = rig()
    r.pipe.hops = [Hop("shard-0", 0, 0.0, 3.0), Hop("shard-1", 0, 0.0, 5.0)]
    r.submit("a", first=10, max_tokens=4)
    r.submit("b", first=40, max_tokens=6)
    await r.run_until_all_finish()
    c, t = r.driver.counters, r.driver.timing
    sizes = {int(k.split(".")[1]): n for k, n in c.items() if k.startswith("decode_batches.")}
    decoded = sum(len(r.tokens(rid)) - 1 for rid in "ab")        # past each prefill's token
    assert sum(sizes.values()) == c["decode_batches"] > 0 and sum(b * n for b, n in sizes.items()) == decoded
    assert set(sizes) <= {1, 2}
    for b, n in sizes.items():
        assert t[f"decode_compute_ms.{b}.shard-0"] == 3.0 * n and t[f"decode_compute_ms.{b}.shard-1"] == 5.0 * n
        assert t[f"decode_batch_ms.{b}"] > 0
    assert sum(t[f"decode_batch_ms.{b}"] for b in sizes) == pytest.approx(t["decode_batch_ms"])


async def test_a_shard_restart_reprefills_every_running_sequence_and_streams_only_pause(rig):
    r = rig()
    failed = []

    def restart(body):
        failed.append(next(i for i, f in enumerate(r.pipe.forwards) if f is body))
        r.pipe.epochs[1] += 1          # shard-1 comes back with a new epoch and no KV
        raise PeerRestarted("shard-1 restarted")
    r.pipe.script = [answer, answer, restart]   # two tokens each, then the restart
    r.submit("a", first=10, max_tokens=6)
    r.submit("b", first=30, max_tokens=6)
    await r.run_until_all_finish()
    sent = failed[0]
    for rid, first in (("a", 10), ("b", 30)):
        assert r.finish(rid).reason == "length" and len(r.tokens(rid)) == 6
    # After the restart each sequence is fed again from position 0: prompt + tokens so far.
    refills = {int(t[0]): (t, p) for body in r.pipe.forwards[sent + 1:] for t, p in rows(body)
               if p[0] == 0}
    for rid, first in (("a", 10), ("b", 30)):
        t, p = refills[first]
        assert list(t) == prompt(first) + r.tokens(rid)[:len(t) - 5]
        assert len(t) == 7             # the two tokens generated before the restart were kept
    assert r.driver.counters["pipeline_changes"] == 1
    assert r.driver.counters["recoveries"] == 1    # the failure and the new epoch: one loss
    r.assert_nothing_left()


def refills(r, since):
    """First tokens of every row fed from position 0 in the forwards after index `since`."""
    return [int(t[0]) for body in r.pipe.forwards[since:] for t, p in rows(body) if p[0] == 0]


def fails_with(error):
    def call(body):
        raise error
    return call


async def undisturbed_tokens(rig, **submit):
    r = rig()
    for rid, kw in submit.items():
        r.submit(rid, **kw)
    await r.run_until_all_finish()
    return {rid: r.tokens(rid) for rid in submit}


@pytest.mark.parametrize("stale", [RemoteError("stale_route", "shard-1 is epoch 2", peer="shard-1"),
                                   RemoteError("kv_missing", "no pages", peer="shard-1"),
                                   RemoteError("shard_unavailable", "shard-1?", peer="shard-0"),
                                   PeerRestarted("shard-1 restarted")], ids=str)
async def test_a_loss_seen_before_the_new_epoch_is_charged_once_and_its_reprefill_kept(rig, stale):
    want = await undisturbed_tokens(rig, a=dict(first=10, max_tokens=6), b=dict(first=30, max_tokens=6))
    r = rig()
    r.pipe.script = [answer, answer, fails_with(PeerRestarted("shard-1 restarted")),
                     fails_with(stale)]                # the retry still goes to the old pipeline
    r.submit("a", first=10, max_tokens=6)
    r.submit("b", first=30, max_tokens=6)
    await r.until(lambda: len(r.pipe.forwards) == 3 and not r.policy.inflight, "the loss")
    assert r.driver.counters["recoveries"] == 1
    r.clock.t += 1.0                                   # the backoff ends: retry on stale epochs
    await r.until(lambda: len(r.pipe.forwards) == 4 and not r.policy.inflight, "the stale retry")
    assert r.driver.counters["recoveries"] == 1 and r.driver.counters["retries_uncharged"] == 1
    r.pipe.epochs[1] += 1                              # now the directory shows the new epoch
    r.clock.t += 2.0
    r.driver.wake.set()
    await r.run_until_all_finish()
    assert r.driver.counters["recoveries"] == 1        # one kill, one charge
    assert r.driver.counters["changes_uncharged"] == 1
    # Re-prefilled from position 0 once on the new epoch (the stale try aside), never again.
    assert sorted(refills(r, 4)) == [10, 30]
    assert {rid: r.tokens(rid) for rid in "ab"} == want
    r.assert_nothing_left()


async def test_no_count_of_losses_fails_a_request_and_its_text_is_the_undisturbed_one(rig):
    want = await undisturbed_tokens(rig, a=dict(first=10, max_tokens=12))
    r = rig()
    kills = 0

    def kill(body):
        nonlocal kills
        kills += 1
        r.pipe.epochs[kills % 2] += 1                  # a different shard each time
        raise PeerDead(f"killed ({kills})")
    r.pipe.script = [answer, kill] * 8                 # eight losses, each after a token
    r.submit("a", first=10, max_tokens=12)
    await r.run_until_all_finish()
    assert kills == 8 and r.driver.counters["recoveries"] == 8
    assert r.finish("a").reason == "length" and r.tokens("a") == want["a"]
    r.assert_nothing_left()


async def test_a_gap_past_the_time_budget_fails_every_request_with_the_unserved_layers(rig):
    r = rig(budget=60.0)

    def answer_then_lose_a_shard(body):
        r.pipe.gap = True                              # the second shard's layers lose their shard
        return answer(body)
    r.pipe.script = [answer_then_lose_a_shard]
    r.submit("a", first=10, max_tokens=6)
    await r.until(lambda: len(r.tokens("a")) == 1, "a first token")
    r.submit("b", first=30, max_tokens=6)
    await r.until(lambda: r.driver.counters["waits.gap"] >= 2, "the driver to see the gap")
    r.clock.t += 59.0                                  # within the budget: streams only pause
    held = r.driver.counters["waits.gap"]
    await r.until(lambda: r.driver.counters["waits.gap"] >= held + 3, "more waits")
    assert r.finish("a") is None and r.finish("b") is None
    r.clock.t += 2.0
    await r.run_until_all_finish()
    for rid in "ab":
        finish = r.finish(rid)
        assert finish.reason == "failed" and "layers 15-30 gone" in finish.detail
        assert "budget 60 s" in finish.detail
    r.assert_nothing_left()


async def test_a_pipeline_failing_every_batch_past_the_budget_fails_with_its_last_error(rig):
    r = rig(budget=10.0)
    r.pipe.script = [fails_with(CallTimeout("shard-1 did not answer"))] * 100
    r.submit("a", max_tokens=3)
    await r.until(lambda: len(r.pipe.forwards) == 1 and not r.policy.inflight, "the failure")
    for wait in (1.0, 2.0, 4.0):                       # backoffs of 1, 2, 4 s: 7 s < 10 s
        r.clock.t += wait
        n = len(r.pipe.forwards)
        await r.until(lambda: len(r.pipe.forwards) == n + 1 and not r.policy.inflight, "a retry")
    assert r.finish("a") is None
    r.clock.t += 4.0                                   # 11 s unserved
    await r.run_until_all_finish()
    finish = r.finish("a")
    assert finish.reason == "failed" and "did not answer" in finish.detail
    assert "budget 10 s" in finish.detail
    r.assert_nothing_left()


async def test_a_batch_that_succeeds_resets_the_budget(rig):
    r = rig(budget=10.0)
    r.pipe.script = [answer, fails_with(PeerDead("gone")), answer, answer,
                     fails_with(PeerDead("gone again"))]
    r.submit("a", first=10, max_tokens=8)
    await r.until(lambda: len(r.pipe.forwards) == 2 and not r.policy.inflight, "first loss")
    r.clock.t += 8.0                                   # 8 s unserved, then served again
    await r.until(lambda: len(r.pipe.forwards) == 5 and not r.policy.inflight, "second loss")
    r.clock.t += 8.0                                   # 8 s more: 16 s in all, but not in a row
    await r.run_until_all_finish()
    assert r.finish("a").reason == "length" and len(r.tokens("a")) == 8
    r.assert_nothing_left()


async def test_penalties_get_every_token_seen_and_others_no_history(rig):
    r = rig()
    r.submit("pen", first=10, max_tokens=4, penalized=True)
    r.submit("plain", first=30, max_tokens=4)
    await r.run_until_all_finish()
    for k, body in enumerate(r.pipe.forwards):
        # Row order is the plan's; the penalized row's history is prompt + tokens so far.
        assert body.history_lens == [5 + k if s.repetition_penalty != 1.0 else 0
                                     for s in body.sampling]
        assert body.history.array().tolist() == prompt(10) + r.tokens("pen")[:k]
    r.assert_nothing_left()


async def test_while_the_pipeline_has_a_gap_nothing_is_sent_and_nothing_fails(rig):
    r = rig()
    r.pipe.gap = True
    r.submit("a", max_tokens=3)
    await r.until(lambda: r.driver.counters["waits.gap"] >= 3, "the driver to wait on the gap")
    assert r.pipe.forwards == [] and r.finish("a") is None
    r.pipe.gap = False
    r.driver.wake.set()
    await r.run_until_all_finish()
    assert r.finish("a").reason == "length" and len(r.tokens("a")) == 3
    r.assert_nothing_left()


@pytest.mark.parametrize("error", [PeerDead("gone"), CallTimeout("late"),
                                   RemoteError("overloaded", "busy", peer="shard-1")])
async def test_the_same_pipeline_failing_is_retried_after_a_doubling_backoff(rig, error):
    r = rig()
    r.pipe.script = [lambda body: (_ for _ in ()).throw(error)] * 2
    r.submit("a", max_tokens=3)
    for attempt, wait in ((1, 1.0), (2, 2.0)):
        await r.until(lambda: len(r.pipe.forwards) == attempt and not r.policy.inflight,
                      f"failure {attempt}")
        assert r.driver.retry_at == pytest.approx(r.clock.t + wait)
        held = r.driver.counters["waits.backoff"]
        await r.until(lambda: r.driver.counters["waits.backoff"] >= held + 3, "the backoff")
        assert len(r.pipe.forwards) == attempt, "retried before the backoff ended"
        r.clock.t += wait
    await r.run_until_all_finish()
    assert r.finish("a").reason == "length" and len(r.tokens("a")) == 3
    assert r.driver.backoff == 1.0     # a good batch resets it
    r.assert_nothing_left()


async def test_a_refused_batch_is_rerun_row_by_row_and_only_the_guilty_request_fails(rig):
    r = rig(max_inflight=3)
    r.pipe.refuse_guilty = True
    r.submit("a", first=10, max_tokens=4)
    r.submit("guilty", first=30, max_tokens=4, top_k=GUILTY_TOP_K)
    r.submit("c", first=50, max_tokens=4)
    await r.run_until_all_finish()
    finish = r.finish("guilty")
    assert finish.reason == "failed" and "bad_sampling" in finish.detail
    assert "top_k 13 is refused" in finish.detail and r.tokens("guilty") == []
    for rid in "ac":
        assert r.finish(rid).reason == "length" and len(r.tokens(rid)) == 4
    first = r.pipe.forwards[0]
    assert len(first.query_lens) == 3            # refused together ...
    assert [len(b.query_lens) for b in r.pipe.forwards[1:4]] == [1, 1, 1]  # ... run alone
    r.assert_nothing_left()


# The codes a retry cannot mend (wire.failures): the batch is at fault, not the pipeline.
@pytest.mark.parametrize("code", sorted(c for c, f in TABLE.items() if not f.retry))
async def test_each_refusal_of_one_request_fails_it_with_the_shards_reason(rig, code):
    r = rig()
    r.pipe.script = [lambda body: (_ for _ in ()).throw(RemoteError(code, "no", peer="shard-1"))]
    r.submit("a", max_tokens=3)
    await r.run_until_all_finish()
    finish = r.finish("a")
    assert finish.reason == "failed" and f"shard-1: {code}: no" in finish.detail
    assert finish.code == code
    assert len(r.pipe.forwards) == 1 and r.driver.counters[f"batch_errors.{code}"] == 1
    r.assert_nothing_left()


async def test_a_refusal_that_passes_alone_loses_nothing(rig):
    r = rig(max_inflight=3)
    r.pipe.script = [lambda body: (_ for _ in ()).throw(RemoteError("internal", "oops"))]
    r.submit("a", first=10, max_tokens=4)
    r.submit("b", first=30, max_tokens=4)
    await r.run_until_all_finish()
    assert all(r.finish(x).reason == "length" and len(r.tokens(x)) == 4 for x in "ab")
    r.assert_nothing_left()


def wrong_shape(body):
    good = answer(body)
    return answer(body, tokens=wire.Tensor(np.append(good.tokens.array(), np.int32(5))))


def float_tokens(body):
    return answer(body, tokens=wire.Tensor(answer(body).tokens.array().astype(np.float32)))


def other_batch(body):
    return answer(body, batch_id=body.batch_id + 100)


def past_vocab(body):
    return answer(body, tokens=wire.Tensor(np.full(len(answer(body).tokens.array()), 10_000,
                                                   np.int32)))


def not_sampled(body):
    return {"tokens": [1]}


def raises_value_error(body):
    raise ValueError("a frame did not decode")


def raises_type_error(body):
    raise TypeError("a bug in the caller")


GARBAGE = [wrong_shape, float_tokens, other_batch, past_vocab, not_sampled, raises_value_error,
           raises_type_error]


@pytest.mark.parametrize("garbage", GARBAGE, ids=lambda f: f.__name__)
async def test_an_unusable_reply_is_counted_and_the_batch_runs_again(rig, garbage):
    r = rig()
    r.pipe.script = [garbage, garbage]
    r.submit("a", first=10, max_tokens=4)
    r.submit("b", first=30, max_tokens=4)
    await r.run_until_all_finish()
    for rid in "ab":               # every token once: nothing was applied from a bad reply
        assert r.finish(rid).reason == "length" and len(r.tokens(rid)) == 4
    assert r.driver.counters["bad_replies"] == 2
    assert r.pipe.forwards[0].tokens.array().tolist() == r.pipe.forwards[2].tokens.array().tolist()
    r.assert_nothing_left()


@pytest.mark.parametrize("garbage", GARBAGE, ids=lambda f: f.__name__)
async def test_a_pipeline_that_always_answers_garbage_fails_the_requests_with_the_reason(rig, garbage):
    r = rig(max_batch_retries=3)
    r.pipe.script = [garbage] * 100
    r.submit("a", max_tokens=4)
    await r.run_until_all_finish()
    finish = r.finish("a")
    assert finish.reason == "failed" and "unusable" in finish.detail
    assert "3 times in a row" in finish.detail
    assert len(r.pipe.forwards) == 3 and r.tokens("a") == []
    r.assert_nothing_left()


async def test_a_batch_that_cannot_be_built_fails_its_requests_instead_of_hanging(rig):
    r = rig()
    r.submit("a", first=10, max_tokens=3)
    r.submit("b", first=30, max_tokens=3)
    del r.requests["a"]            # a bug: the policy tracks a request the service forgot
    await r.until(lambda: not r.policy.has_work(), "the unbuildable batch to end")
    finish = r.finish("b")         # planned in the same batch: it ends with the reason too
    assert finish.reason == "failed" and "could not build the batch" in finish.detail
    assert r.pipe.forwards == []
    r.assert_nothing_left()


LATE = [PeerDead("shard-1 stopped heartbeating"), CallTimeout("shard-0: no reply"),
        RemoteError("peer_dead", "shard-1 stopped heartbeating", peer="shard-0"),
        RemoteError("stale_route", "shard-1, stage 1 of the route, is not live", peer="shard-0")]


@pytest.mark.parametrize("late", LATE, ids=str)
async def test_a_shard_back_with_the_same_epoch_goes_on_without_a_reprefill(rig, late):
    want = await undisturbed_tokens(rig, a=dict(first=10, max_tokens=6), b=dict(first=30, max_tokens=6))
    r = rig()

    def pause(body):
        r.pipe.gap = True                              # its heartbeats stop: it leaves the chain
        raise late
    r.pipe.script = [answer, answer, pause]
    r.submit("a", first=10, max_tokens=6)
    r.submit("b", first=30, max_tokens=6)
    await r.until(lambda: len(r.pipe.forwards) == 3 and not r.policy.inflight, "the pause")
    await r.until(lambda: r.driver.counters["waits.gap"] >= 2, "the driver to see the gap")
    r.pipe.gap = False                                 # SIGCONT: the same process, same epoch
    r.clock.t += 1.0                                   # past the backoff
    await r.run_until_all_finish()
    assert r.driver.counters["recoveries"] == 0 and r.driver.counters["retries_same_epoch"] == 1
    assert refills(r, 3) == []                         # nothing fed again from position 0
    assert {rid: r.tokens(rid) for rid in "ab"} == want
    r.assert_nothing_left()


async def test_a_silent_shard_replaced_by_a_new_process_is_reprefilled_once(rig):
    want = await undisturbed_tokens(rig, a=dict(first=10, max_tokens=6), b=dict(first=30, max_tokens=6))
    r = rig()

    def pause(body):
        r.pipe.gap = True
        raise PeerDead("shard-1 stopped heartbeating")
    r.pipe.script = [answer, answer, pause, fails_with(PeerDead("shard-1 still silent"))]
    r.submit("a", first=10, max_tokens=6)
    r.submit("b", first=30, max_tokens=6)
    await r.until(lambda: len(r.pipe.forwards) == 3 and not r.policy.inflight, "the pause")
    r.pipe.gap = False                                 # heard once more, then silent again
    r.clock.t += 1.0
    await r.until(lambda: len(r.pipe.forwards) == 4 and not r.policy.inflight, "a late retry")
    assert r.driver.counters["recoveries"] == 0
    r.pipe.epochs[1] += 1                              # the watcher killed and respawned it
    r.clock.t += 2.0
    r.driver.wake.set()
    await r.run_until_all_finish()
    assert r.driver.counters["recoveries"] == 1 and r.driver.counters["pipeline_changes"] == 1
    assert sorted(refills(r, 4)) == [10, 30]           # each re-prefilled once, on the new epoch
    assert {rid: r.tokens(rid) for rid in "ab"} == want
    r.assert_nothing_left()


async def test_a_deadline_that_passes_while_its_batch_returns_is_the_streams_last_event(rig):
    """The batch comes back after the deadline passed but before its timer woke the driver: the
    step run before the batch's tokens go out ends the request, and the token computed before must
    not follow: a caller reads a stream up to its finish (the scheduler's handler did, and then
    waited for ever: tests/health/test_drills.py hung on it about one run in six)."""
    r = rig()

    def late(body):
        r.clock.t += 30.0                                # the deadline passes while it is out
        return answer(body)
    r.pipe.script = [late]
    r.submit("a", first=10, max_tokens=6, deadline_s=20.0)
    await r.until(lambda: r.finish("a") is not None or r.tokens("a"), "the batch back")
    outs = r.events["a"]
    assert [o.finish is not None for o in outs] == [True], outs
    assert outs[0].finish.reason == "failed" and outs[0].finish.detail.startswith("deadline: 20 s passed")
    assert r.requests["a"].completion_tokens == 0 and r.driver.counters["outputs_after_finish"] == 1
    r.assert_nothing_left()


async def test_a_request_past_its_deadline_fails_with_reason_deadline_while_others_wait(rig):
    r = rig(budget=300.0)

    def answer_then_lose_a_shard(body):
        r.pipe.gap = True
        return answer(body)
    r.pipe.script = [answer_then_lose_a_shard]
    r.submit("a", first=10, max_tokens=6, deadline_s=20.0)
    r.submit("b", first=30, max_tokens=6)              # no deadline: waits for the pipeline
    await r.until(lambda: r.tokens("a") and r.driver.counters["waits.gap"] >= 2, "the gap")
    r.clock.t += 19.0
    r.driver.wake.set()
    held = r.driver.counters["waits.gap"]
    await r.until(lambda: r.driver.counters["waits.gap"] > held, "another look")
    assert r.finish("a") is None                       # 19 s of 20: still waiting
    r.clock.t += 2.0
    r.driver.wake.set()
    await r.until(lambda: r.finish("a") is not None, "the deadline")
    finish = r.finish("a")
    assert finish.reason == "failed" and finish.detail.startswith("deadline: 20 s passed")
    assert r.finish("b") is None and r.driver.counters["deadlines"] == 1
    r.pipe.gap = False                                 # the pipeline is back: b goes on
    await r.run_until_all_finish()
    assert r.finish("b").reason == "length" and len(r.tokens("b")) == 6
    r.assert_nothing_left()


async def test_the_next_batch_goes_out_before_the_stream_hears_of_the_token(rig):
    # At low concurrency a token waits for the pipeline, not for its caller: the next forward is
    # sent before the caller's task handles the token (which then overlaps the shards' work).
    r = rig()
    log = []
    call = r.pipe.call

    async def logged_call(shard, body, timeout):
        log.append("forward")
        return await call(shard, body, timeout)

    r.driver._call = logged_call
    r.submit("a", max_tokens=3)

    async def caller():
        for _ in range(3):
            event = await r.requests["a"].events.get()
            log.append("token")
            r.events.setdefault("a", []).append(event.output)

    await asyncio.wait_for(caller(), 10)
    assert log[:5] == ["forward", "forward", "token", "forward", "token"]


class FakeConstraint:
    """A grammar that allows token `allow` only, and notes the thread each mask is made on;
    `fail_at`: the number of generated tokens it cannot follow."""

    def __init__(self, allow=5, fail_at=None):
        self.allow, self.fail_at, self.threads = allow, fail_at, []

    def mask(self, generated):
        from services.scheduler.grammar.errors import GrammarError
        self.threads.append(threading.get_ident())
        if len(generated) == self.fail_at:
            raise GrammarError("token 3 is not allowed here")
        words = np.zeros(4, np.uint32)
        words[self.allow >> 5] = np.uint32(1 << (self.allow & 31))
        return words

    def forced(self, generated):
        return []


@pytest.mark.parametrize("n", [1, MASKS_OFF_LOOP])
async def test_masks_of_a_batch_of_many_constrained_rows_are_made_off_the_event_loop(rig, n):
    r = rig(max_inflight=1)
    grammars = {f"g{i}": FakeConstraint(allow=5 + i, fail_at=2 if i == 1 else None)
                for i in range(n)}
    for i, (rid, c) in enumerate(grammars.items()):
        r.submit(rid, first=10 + 10 * i, max_tokens=3, constraint=c)
    r.submit("free", first=90, max_tokens=3)
    await r.run_until_all_finish()
    loop_thread = threading.get_ident()
    off = [t != loop_thread for c in grammars.values() for t in c.threads]
    assert off and any(off) is (n >= MASKS_OFF_LOOP)
    assert (r.driver.counters["masks_off_loop"] > 0) is (n >= MASKS_OFF_LOOP)
    # The free row carries no mask; each constrained one carries its grammar's.
    body = next(b for b in r.pipe.forwards if len(b.mask_rows) == n)
    assert len(body.sampling) == n + 1 and body.masks.array().shape == (n, 4)
    assert sorted(int(np.flatnonzero(np.unpackbits(m.view(np.uint8), bitorder="little"))[0])
                  for m in body.masks.array()) == [5 + i for i in range(n)]
    assert r.finish("free").reason == "length"
    if n > 1:                                   # its grammar failed: only it ends failed
        assert r.finish("g1").reason == "failed" and "token 3" in r.finish("g1").detail
        assert r.finish("g0").reason == "length"
