"""Drives the policy against the shard pipeline: plans out, sampled tokens back, recovery.

One task owns the loop. Each micro-batch the policy plans goes to the first shard as a
`shard.forward` and is awaited in its own task, so up to `max_inflight` batches are in the
pipeline at once. When a batch fails because a shard died or restarted, every sequence that
held KV is re-prefilled (the policy's `reset_for_recovery`) once the pipeline is whole again;
streams only pause. A batch the shards refuse as malformed fails its own requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable

from bus.errors import BusError, RemoteError

from .batch_plan import BatchPlan, Output, Sample
from .errors import UnknownBatch
from .forward_plan import to_forward
from .pipeline import Stage, signature
from .policy import Scheduler
from .streams import Event, RequestStream

log = logging.getLogger("llmbus.scheduler")

# Errors that mean "this batch is wrong", not "the pipeline is broken": retrying cannot help.
_REFUSED = frozenset({"bad_batch", "bad_sampling", "bad_logits", "bad_frame", "internal",
                      "unknown_method"})


class Driver:
    def __init__(self, policy: Scheduler, requests: dict[str, RequestStream],
                 call: Callable, chain: Callable[[], list[Stage] | None],
                 batch_timeout: float = 120.0):
        self.policy = policy
        self.requests = requests
        self._call = call            # async (shard name, Forward, timeout) -> Sampled
        self._chain = chain          # the pipeline now, or None while it has a gap
        self.batch_timeout = batch_timeout
        self.wake = asyncio.Event()
        self.counters: Counter[str] = Counter()
        self.timing: Counter[str] = Counter()      # summed milliseconds
        self.pipeline: list[Stage] = []
        self._seen: tuple | None = None          # signature the KV on the shards belongs to
        self._failed: tuple | None = None        # signature a batch last failed against
        self._retry_at = 0.0
        self._backoff = 0.5
        self._batches: set[asyncio.Task] = set()

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            try:
                self._step()
            except Exception:  # a bug here must not silently stop every stream
                log.exception("scheduler step failed")
                self.counters["step_errors"] += 1
                await asyncio.sleep(0.5)
                self.wake.set()

    async def stop(self) -> None:
        for t in self._batches:
            t.cancel()
        await asyncio.gather(*self._batches, return_exceptions=True)

    def _step(self) -> None:
        if not self.policy.has_work():
            return
        chain = self._chain()
        if chain is None or (signature(chain) == self._failed and time.monotonic() < self._retry_at):
            self._poll_later(0.2)  # waiting for the pipeline to be whole (again)
            return
        sig = signature(chain)
        if self._seen is not None and sig != self._seen:
            # A shard restarted (new epoch) or was replaced: the KV on it is gone.
            self.counters["pipeline_changes"] += 1
            self._recover(f"pipeline changed to {[n for n, _ in sig]}")
        self._seen, self.pipeline = sig, chain
        while (plan := self.policy.schedule()) is not None:
            # Built now, while every planned request still has its stream (a cancel may come
            # before the task first runs).
            body = to_forward(plan, {c.request_id: self.requests[c.request_id].sampling
                                     for c in plan.chunks if c.sample},
                              {c.request_id: h for c in plan.chunks if c.sample
                               and (h := self.requests[c.request_id].history) is not None},
                              chain)
            task = asyncio.get_running_loop().create_task(
                self._run_batch(plan, body, chain[0].name, sig))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    def _poll_later(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.wake.set)

    async def _run_batch(self, plan: BatchPlan, body, first: str, sig: tuple) -> None:
        try:
            t0 = time.perf_counter()
            reply = await self._call(first, body, self.batch_timeout)
            # Where a batch's time goes: compute per shard against the whole round trip.
            self.timing["batch_ms"] += (time.perf_counter() - t0) * 1e3
            for shard, ms in reply.hop_ms.items():
                self.timing[f"compute_ms.{shard}"] += ms
        except BusError as e:
            self._batch_failed(plan, sig, e)
        else:
            try:
                self._batch_done(plan, reply)
            except Exception as e:  # a malformed reply: the batch runs again, nothing is lost
                log.exception("batch %d: bad reply", plan.batch_id)
                self.counters["bad_replies"] += 1
                self._batch_failed(plan, sig, BusError(f"bad reply: {e}"))
        finally:
            self.wake.set()

    def _batch_done(self, plan: BatchPlan, reply) -> None:
        if plan.batch_id not in self.policy.inflight:
            return  # dropped by a recovery while it ran
        self._failed, self._backoff = None, 0.5
        tokens = reply.tokens.array()
        logprobs = reply.logprobs.array()
        top_ids = reply.top_ids.array() if reply.top_ids is not None else None
        top_lps = reply.top_logprobs.array() if reply.top_logprobs is not None else None
        n = sum(c.sample for c in plan.chunks)
        if tokens.shape != (n,) or logprobs.shape != (n,) or \
                (top_ids is not None and (top_ids.shape[0] != n or top_lps.shape != top_ids.shape)):
            # Checked before any decoder is fed, so that running the batch again loses nothing.
            raise ValueError(f"{n} sampled rows expected, got tokens {tokens.shape}")
        samples, tops = {}, {}
        for row, chunk in enumerate(c for c in plan.chunks if c.sample):
            stream = self.requests.get(chunk.request_id)
            if stream is None or not self.policy.is_tracked(chunk.request_id):
                continue  # cancelled while the batch ran
            tok = int(tokens[row])
            samples[chunk.request_id] = Sample(tok, stream.text_of(tok), float(logprobs[row]))
            n = stream.sampling.top_logprobs
            if n and top_ids is not None:
                tops[chunk.request_id] = ([int(t) for t in top_ids[row, :n]],
                                          [float(x) for x in top_lps[row, :n]])
        try:
            outputs = self.policy.complete(plan.batch_id, samples)
        except UnknownBatch:
            return
        self.counters["batches_done"] += 1
        for o in outputs:
            self._deliver(o, *tops.get(o.request_id, ((), ())))

    def _batch_failed(self, plan: BatchPlan, sig: tuple, e: BusError) -> None:
        if plan.batch_id not in self.policy.inflight:
            return  # an earlier failure already reset everything in flight
        code = e.code if isinstance(e, RemoteError) else type(e).__name__
        self.counters[f"batch_errors.{code}"] += 1
        if code in _REFUSED:
            # Deterministic: the same batch would fail again. End its requests with the reason.
            self.policy.abort_batch(plan.batch_id)
            for c in plan.chunks:
                out = self.policy.fail(c.request_id, f"the pipeline refused the batch: {e}")
                if out is not None:
                    self._deliver(out)
            return
        log.warning("batch %d failed (%s); re-prefilling after the pipeline recovers", plan.batch_id, e)
        self._failed, self._retry_at = sig, time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, 5.0)
        self._recover(str(e))

    def _recover(self, why: str) -> None:
        self.counters["recoveries"] += 1
        for out in self.policy.reset_for_recovery():
            self._deliver(out)
        log.warning("recovery: %s", why)

    def _deliver(self, output: Output, top_ids=(), top_logprobs=()) -> None:
        stream = self.requests.get(output.request_id)
        if stream is not None:
            stream.deliver(Event(output, list(top_ids), list(top_logprobs)))
