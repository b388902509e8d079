"""Drives the policy against the shard pipeline: plans out, sampled tokens back, recovery.

One task owns the loop. Each micro-batch the policy plans goes to the first shard as a
`shard.forward` and is awaited in its own task, so up to `max_inflight` batches are in the
pipeline at once. Whatever goes wrong, a batch leaves the policy's in-flight set:
- the pipeline broke (a shard died, restarted, timed out): every sequence that held KV is
  re-prefilled (the policy's `reset_for_recovery`) once the pipeline is whole again, after a
  backoff while it is the same pipeline; streams only pause. One loss is charged once: a
  recovery happens only when KV computed since the last one is gone (a batch failed with a
  proof of it, `_KV_LOST`, or the pipeline it lives on changed); a retry failing on a stale
  pipeline, or the new epoch appearing after the loss was charged, only runs the lost chunks
  again. A shard that stops answering and comes back as the same process (paused, late) kept
  its cache: its batches only run again;
- no request fails for how often that happens: only when the pipeline has served nothing for
  `unserved_budget_s` while there was work (a layer range has no shard, or every batch fails),
  every request ends with that reason;
- the shards refused the batch (a code a retry cannot mend), naming no row: its sequences run again each in a
  batch of its own; a request refused alone fails with the shard's reason;
- the reply does not fit the batch, or anything else is raised: the batch runs again, and a
  request whose results are unusable `max_batch_retries` times in a row fails with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable

import numpy as np

from bus.errors import BusError, PeerRestarted, RemoteError, code_of
from wire.failures import GRAMMAR_FAILED, INTERNAL, KV_MISSING, PEER_RESTARTED, UNSERVED, failure
from wire.messages.shard import ForwardResult

from ..batching.batches import MicroBatch, Output, SampledToken
from ..batching.errors import BadReply, UnknownBatch
from ..batching.policy import Scheduler
from ..grammar.errors import GrammarError
from .chains import Stage, signature
from .forward import to_forward
from .streams import RequestStream, StreamEvent

log = logging.getLogger("llmbus.scheduler")

# Errors that prove KV on a shard is gone: a process of the pipeline was replaced, or a shard
# lacks positions it wrote. Any other failure (no answer, a stage not live, `stale_route`) may
# be a shard that is only late; a restart behind it shows as a new epoch in the pipeline.
_KV_LOST = frozenset({PEER_RESTARTED, KV_MISSING})
# A batch with this many constrained rows computes their masks in a worker thread; fewer are
# computed on the event loop (a few tens of microseconds each: less than the hop to a thread).
MASKS_OFF_LOOP = 4


def compute_masks(grammars: dict) -> tuple[dict, dict]:
    """Each constrained row's mask, {request id: words} (none for a row free at this step), and
    {request id: why} for those whose grammar cannot follow their tokens."""
    masks, failed = {}, {}
    for rid, (constraint, generated) in grammars.items():
        try:
            words = constraint.mask(generated)
        except GrammarError as e:
            failed[rid] = str(e)
            continue
        if words is not None:     # None: this draw is free (a triggered grammar not begun)
            masks[rid] = words
    return masks, failed


def _refused(e: BusError) -> bool:
    """The batch itself is at fault, not the pipeline: sent again as it is, it fails again (the
    shard's code says a retry cannot help)."""
    return isinstance(e, RemoteError) and not failure(e.code).retry


def _proves_loss(e: BusError) -> bool:
    return isinstance(e, PeerRestarted) or (isinstance(e, RemoteError) and e.code in _KV_LOST)


class Driver:
    """Runs the policy's micro-batches through the pipeline that `chain` names, with `call`."""

    def __init__(self, policy: Scheduler, requests: dict[str, RequestStream],
                 call: Callable, chain: Callable[[], list[Stage] | None],
                 batch_timeout: float = 120.0, *, backoff: tuple[float, float] = (0.5, 5.0),
                 poll_s: float = 0.2, clock: Callable[[], float] = time.monotonic,
                 unserved_budget_s: float = 300.0,
                 describe_gap: Callable[[], str] = lambda: "the shard pipeline has a gap",
                 on_batch: Callable[[float | None, str], None] = lambda seconds, error: None):
        self.policy = policy
        self.requests = requests
        self._call = call            # async (shard name, Forward, timeout) -> ForwardResult
        self._chain = chain          # the pipeline now, or None while it has a gap
        self.batch_timeout = batch_timeout
        self.poll_s = poll_s         # how often a gap or a backoff is looked at again
        self._clock = clock
        self.unserved_budget_s = unserved_budget_s
        self._describe_gap = describe_gap   # which layers have no shard, for the failure reason
        # Told of each batch's end: (decode step seconds or None, "") when served, (None, the
        # error) when the pipeline failed it: what a circuit breaker counts.
        self._on_batch = on_batch
        self._first_backoff, self._max_backoff = backoff
        self.wake = asyncio.Event()
        self.counters: Counter[str] = Counter()
        self.timing: Counter[str] = Counter()      # summed milliseconds
        self._seen: tuple | None = None          # signature the KV on the shards belongs to
        self._failed: tuple | None = None        # signature a batch last failed against
        # The pipeline the KV computed since the last recovery lives on; None while nothing was
        # computed since (then losing the pipeline loses nothing, and is not charged again).
        self._kv_sig: tuple | None = None
        self._unserved_since: float | None = None  # since when work waits on a broken pipeline
        self._last_error = ""
        self.retry_at = 0.0                      # no batch runs on `_failed` before this
        self.backoff = self._first_backoff       # the wait after the next failure
        self._batches: set[asyncio.Task] = set()
        self._deadline_timer: asyncio.TimerHandle | None = None

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if not self._try_step():
                await asyncio.sleep(0.5)
                self.wake.set()

    def _try_step(self) -> bool:
        """One step; False when it failed (logged and counted)."""
        try:
            self._step()
            return True
        except Exception:  # a bug here must not silently stop every stream
            log.exception("scheduler step failed")
            self.counters["step_errors"] += 1
            return False

    async def stop(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        for t in self._batches:
            t.cancel()
        await asyncio.gather(*self._batches, return_exceptions=True)

    def _step(self) -> None:
        self._expire()
        if not self.policy.has_work():
            self._unserved_since = None   # the budget counts only while someone waits
            return
        chain = self._chain()
        if self._past_budget(chain):
            return
        if chain is None:
            self.counters["waits.gap"] += 1
            if self._unserved_since is None:
                self._unserved_since = self._clock()
            self._poll_later(self.poll_s)  # waiting for the pipeline to be whole again
            return
        sig = signature(chain)
        if sig == self._failed and (wait := self.retry_at - self._clock()) > 0:
            self.counters["waits.backoff"] += 1  # the same pipeline just failed: give it time
            self._poll_later(min(wait, self.poll_s))
            return
        if self._seen is not None and sig != self._seen:
            self._pipeline_changed(sig)
        self._seen = sig
        while (batch := self.policy.schedule()) is not None:
            try:
                # Built now, while every planned request still has its stream (a cancel may come
                # before the task first runs).
                sampling = {c.request_id: self.requests[c.request_id].sampling
                            for c in batch.chunks if c.sample}
                histories = {c.request_id: self.policy.history(c.request_id)
                             for c in batch.chunks
                             if c.sample and self.requests[c.request_id].sampling.penalized}
                grammars = self._grammars(batch)
                if len(grammars) >= MASKS_OFF_LOOP:
                    run = self._masked_then_run(batch, sampling, histories, chain, grammars, sig)
                else:
                    run = self._run_batch(batch, to_forward(
                        batch, sampling, histories, chain, self._masks(grammars)),
                        chain[0].name, sig)
            except Exception as e:  # a bug: its requests end with the reason, none hangs
                log.exception("batch %d could not be built", batch.batch_id)
                self._give_up(batch, f"the scheduler could not build the batch: {e!r}")
                continue
            task = asyncio.get_running_loop().create_task(run)
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    def _grammars(self, batch: MicroBatch) -> dict:
        """The constrained sampling rows of a batch: request id -> (its constraint, the tokens
        it has generated, as they are now)."""
        out = {}
        for c in batch.chunks:
            constraint = self.requests[c.request_id].constraint if c.sample else None
            if constraint is not None:
                out[c.request_id] = (constraint, tuple(self.policy.generated(c.request_id)))
        return out

    def _masks(self, grammars: dict) -> dict:
        """The grammar masks of a batch's constrained rows. A request whose grammar cannot
        follow its tokens ends failed (its row, unmasked, samples a token no one reads)."""
        masks, failed = compute_masks(grammars)
        for rid, why in failed.items():
            self.counters["grammar_failed"] += 1
            if o := self.policy.fail(rid, f"its grammar failed: {why}", GRAMMAR_FAILED):
                self._deliver(o)
        return masks

    async def _masked_then_run(self, batch: MicroBatch, sampling: dict, histories: dict,
                               chain: list[Stage], grammars: dict, sig: tuple) -> None:
        """A batch with many constrained rows: their masks are computed in a worker thread
        (llguidance's own code runs without the GIL), so that the event loop goes on handling
        the other batches' results meanwhile; then the batch runs as any other."""
        try:
            masks, failed = await asyncio.get_running_loop().run_in_executor(
                None, compute_masks, grammars)
            for rid, why in failed.items():
                self.counters["grammar_failed"] += 1
                if o := self.policy.fail(rid, f"its grammar failed: {why}", GRAMMAR_FAILED):
                    self._deliver(o)
            body = to_forward(batch, sampling, histories, chain, masks)
        except Exception as e:  # a bug: its requests end with the reason, none hangs
            log.exception("batch %d could not be built", batch.batch_id)
            self._give_up(batch, f"the scheduler could not build the batch: {e!r}")
            self.wake.set()
            return
        self.counters["masks_off_loop"] += 1
        await self._run_batch(batch, body, chain[0].name, sig)

    def _forced(self, outputs: list[Output]) -> list[Output]:
        """What the grammars of the requests that just drew a token force next: taken at once
        (the policy's `force`), computed by their next step as one chunk. Not for a request that
        asked for top logprobs: forced tokens have none to report."""
        out = []
        for o in outputs:
            stream = self.requests.get(o.request_id)
            if o.finish is not None or stream is None or stream.constraint is None \
                    or stream.sampling.top_logprobs:
                continue
            try:
                forced = stream.constraint.forced(self.policy.generated(o.request_id))
            except GrammarError:
                continue     # the next mask finds it too, and ends the request with the reason
            if forced:
                self.counters["grammar_forced"] += len(forced)
                out += self.policy.force(o.request_id, forced)
        return out

    def _expire(self) -> None:
        """End the requests past their deadline, and look again at the next one's."""
        if expired := self.policy.expire():
            self.counters["deadlines"] += len(expired)
            self._deliver_all(expired)
        if (at := self.policy.next_deadline()) is not None:
            if self._deadline_timer is not None:
                self._deadline_timer.cancel()
            delay = max(0.0, at - self.policy.clock())
            self._deadline_timer = asyncio.get_running_loop().call_later(delay, self.wake.set)

    def _pipeline_changed(self, sig: tuple) -> None:
        """A shard restarted (new epoch) or was replaced: the KV on the old one is gone."""
        self.counters["pipeline_changes"] += 1
        if self._kv_sig not in (None, sig):
            self._recover(f"pipeline changed to {[n for n, *_ in sig]}")
            return
        # Nothing computed since the loss was charged: batches still out on the old pipeline
        # only run again (their results, if any come, would live on the old processes).
        for batch_id in self.policy.inflight:
            self.policy.abort_batch(batch_id)
        self.counters["changes_uncharged"] += 1

    def _past_budget(self, chain) -> bool:
        """End every request once the pipeline has served nothing for the time budget."""
        since = self._unserved_since
        if since is None or (waited := self._clock() - since) <= self.unserved_budget_s:
            return False
        why = (self._describe_gap() if chain is None else
               f"every batch on {[s.name for s in chain]} failed (last: {self._last_error})")
        reason = (f"{why}; nothing served for {waited:.0f} s "
                  f"(budget {self.unserved_budget_s:.0f} s)")
        log.error("giving up on every request: %s", reason)
        self.counters["unserved_give_ups"] += 1
        self._deliver_all(self.policy.fail_all(reason, UNSERVED))
        self._unserved_since = None
        return True

    def _poll_later(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.wake.set)

    async def _run_batch(self, batch: MicroBatch, body, first: str, sig: tuple) -> None:
        try:
            t0 = time.perf_counter()
            try:
                reply = await self._call(first, body, self.batch_timeout)
            except BusError as e:
                self._batch_failed(batch, sig, e)
                return
            except Exception as e:  # not the bus's own error: e.g. a reply that did not decode
                self._bad_reply(batch, e)
                return
            try:
                self._batch_done(batch, reply, time.perf_counter() - t0, sig)
            except Exception as e:  # checked before the policy applies anything: nothing is lost
                self._bad_reply(batch, e)
        except Exception as e:  # a bug in the handling above: the batch must still end
            log.exception("batch %d: handling its result failed", batch.batch_id)
            self.counters["driver_errors"] += 1
            self._give_up(batch, f"the scheduler failed handling this batch: {e!r}")
        finally:
            self.wake.set()

    def _batch_done(self, batch: MicroBatch, reply, seconds: float, sig: tuple | None = None) -> None:
        if batch.batch_id not in self.policy.inflight:
            return  # dropped by a recovery while it ran
        if not isinstance(reply, ForwardResult) or reply.batch_id != batch.batch_id:
            raise BadReply(f"batch {batch.batch_id} came back as {type(reply).__name__} "
                           f"{getattr(reply, 'batch_id', '')}")
        tokens = reply.tokens.array()
        logprobs = reply.logprobs.array()
        top_ids = reply.top_ids.array() if reply.top_ids is not None else None
        top_lps = reply.top_logprobs.array() if reply.top_logprobs is not None else None
        n = sum(c.sample for c in batch.chunks)
        errors = reply.errors or [""] * n   # []: every row sampled
        if tokens.shape != (n,) or logprobs.shape != (n,) or tokens.dtype.kind not in "iu" or \
                logprobs.dtype.kind != "f" or len(errors) != n or (top_ids is not None and (
                    top_ids.ndim != 2 or top_ids.shape[0] != n or top_lps is None
                    or top_lps.shape != top_ids.shape)):
            raise BadReply(f"{n} sampled rows expected, got tokens {tokens.dtype}{tokens.shape}, "
                           f"logprobs {logprobs.dtype}{logprobs.shape}, {len(errors)} errors")
        pooling = [c for c in batch.chunks if c.pool]
        pooled = reply.pooled.array() if reply.pooled is not None else None
        if pooling and (pooled is None or pooled.ndim != 2 or pooled.shape[0] != len(pooling)
                        or pooled.dtype != np.float32 or not np.isfinite(pooled).all()):
            raise BadReply(f"{len(pooling)} pooled rows expected, got "
                           f"{None if pooled is None else (pooled.dtype, pooled.shape)}")
        # Where a batch's time goes: compute per shard against the whole round trip.
        self.timing["batch_ms"] += seconds * 1e3
        compute = {h.shard: h.compute_ms for h in reply.hops}
        for shard, ms in compute.items():
            self.timing[f"compute_ms.{shard}"] += ms
        if batch.num_tokens == len(batch.chunks):   # decodes only: the engine's own step
            self.timing["decode_compute_ms"] += sum(compute.values())
            self.timing["decode_batch_ms"] += seconds * 1e3    # its round trip, hops and all
            self.counters["decode_batches"] += 1
            # The same by rows, each shard's apart: a step's cost at each batch size, as the
            # shards served it (an average over every size would mix a level's ragged start
            # and end into its full steps).
            rows = batch.num_tokens
            self.counters[f"decode_batches.{rows}"] += 1
            self.timing[f"decode_batch_ms.{rows}"] += seconds * 1e3
            for shard, ms in compute.items():
                self.timing[f"decode_compute_ms.{rows}.{shard}"] += ms
        self.policy.record_step({k: ms / 1e3 for k, ms in compute.items()}, batch.num_tokens)
        samples, failures, tops = {}, {}, {}
        for row, chunk in enumerate(c for c in batch.chunks if c.sample):
            stream = self.requests.get(chunk.request_id)
            if stream is None or not self.policy.is_tracked(chunk.request_id):
                continue  # cancelled while the batch ran
            if errors[row]:
                # This row alone failed on the last shard (its params, history or logits).
                failures[chunk.request_id] = f"the last shard could not sample it: {errors[row]}"
                continue
            samples[chunk.request_id] = SampledToken(int(tokens[row]), float(logprobs[row]))
            k = stream.sampling.top_logprobs
            if k and top_ids is not None:
                tops[chunk.request_id] = ([int(t) for t in top_ids[row, :k]],
                                          [float(x) for x in top_lps[row, :k]])
        held = {c.request_id for c in pooling if self.policy.holds(c.request_id, batch.batch_id)}
        try:
            outputs = self.policy.complete(batch.batch_id, samples, failures)
        except UnknownBatch:
            return
        if pooling:   # how often embeddings share a batch with sampling rows (generation)
            self.counters["pooled_rows"] += len(pooling)
            self.counters["batches_pooled_and_sampled"] += n > 0
        for row, chunk in enumerate(pooling):   # applied: the embedding's part is in
            stream = self.requests.get(chunk.request_id)
            if chunk.request_id in held and stream is not None and stream.pooled is not None:
                stream.pooled.add(chunk.start, len(chunk.token_ids), pooled[row])
        self._failed, self.backoff = None, self._first_backoff
        self._unserved_since = None
        if self._kv_sig is None:
            self._kv_sig = sig if sig is not None else self._seen
        self.counters["batches_done"] += 1
        self.counters["rows_failed"] += len(failures)
        self._on_batch(seconds if batch.num_tokens == len(batch.chunks) else None, "")
        outputs += self._forced(outputs)
        # The next batch is planned and sent before the streams hear of this one: a token waits
        # for the pipeline, so the pipeline gets the event loop first (a failed step retries on
        # the wake-up this batch's end sets).
        self._try_step()
        for o in outputs:
            self._deliver(o, *tops.get(o.request_id, ((), ())))

    def _batch_failed(self, batch: MicroBatch, sig: tuple, e: BusError) -> None:
        if batch.batch_id not in self.policy.inflight:
            return  # an earlier failure already reset everything in flight
        self.counters[f"batch_errors.{code_of(e)}"] += 1
        if _refused(e):
            # Deterministic for this batch, but usually one row is to blame: the policy runs its
            # sequences alone, and fails one the shards refuse alone.
            log.warning("batch %d refused (%s)", batch.batch_id, e)
            self._deliver_all(self.policy.refuse_batch(
                batch.batch_id, f"the pipeline refused this request: {e}", e.code))
            return
        self._on_batch(None, str(e) or type(e).__name__)
        self._failed, self.retry_at = sig, self._clock() + self.backoff
        self.backoff = min(self.backoff * 2, self._max_backoff)
        self._last_error = str(e)
        if self._unserved_since is None:
            self._unserved_since = self._clock()
        if self._kv_sig is None:
            # Nothing was computed since the last recovery (a retry on a stale pipeline, or the
            # first batches ever): no KV is lost, the batch only runs again.
            log.warning("batch %d failed (%s); running it again", batch.batch_id, e)
            self.counters["retries_uncharged"] += 1
            self.policy.abort_batch(batch.batch_id)
            return
        if not _proves_loss(e):
            # A shard stopped answering (paused, overloaded, cut off) but no new epoch showed: if
            # it comes back as the same process its cache is intact and the batch only runs
            # again; if it comes back as a new one, the pipeline change charges the loss.
            log.warning("batch %d failed (%s); running it again once %s answers", batch.batch_id,
                        e, "the same pipeline")
            self.counters["retries_same_epoch"] += 1
            self.policy.abort_batch(batch.batch_id)
            return
        log.warning("batch %d failed (%s); re-prefilling after the pipeline recovers", batch.batch_id, e)
        self._recover(str(e))

    def _bad_reply(self, batch: MicroBatch, e: Exception) -> None:
        if batch.batch_id not in self.policy.inflight:
            return
        log.warning("batch %d: unusable result (%r); running it again", batch.batch_id, e)
        self.counters["bad_replies"] += 1
        self._deliver_all(self.policy.retry_batch(
            batch.batch_id, f"the pipeline's results were unusable: {e}"))

    def _give_up(self, batch: MicroBatch, reason: str) -> None:
        """End every request of a batch with `reason`: used when no retry can be trusted."""
        if batch.batch_id in self.policy.inflight:
            self.policy.abort_batch(batch.batch_id)
        self._deliver_all(o for c in batch.chunks
                          if (o := self.policy.fail(c.request_id, reason, INTERNAL)))

    def _recover(self, why: str) -> None:
        self.counters["recoveries"] += 1
        self.policy.reset_for_recovery()
        self._kv_sig = None
        log.warning("recovery: %s", why)

    def _deliver_all(self, outputs) -> None:
        for out in outputs:
            self._deliver(out)

    def _deliver(self, output: Output, top_ids=(), top_logprobs=()) -> None:
        stream = self.requests.get(output.request_id)
        if stream is not None and not stream.deliver(StreamEvent(output, list(top_ids), list(top_logprobs))):
            self.counters["outputs_after_finish"] += 1
