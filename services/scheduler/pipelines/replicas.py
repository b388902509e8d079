"""The scheduler's pipelines at run time: each a chain of shards with its own policy and driver.

Each pipeline's sequences hold KV in its own shards, so a request stays on the pipeline it was
given: the least loaded one in rotation. A pipeline that loses its chain (a replica died and no spare
replaces it), or whose breaker opened for failures, hands its sequences to the survivors, where
they are prefilled again from prompt + generated tokens: the client sees only a pause. One pipeline
behaves as the single pipeline always did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..batching.policy import Scheduler
from ..batching.sequence import Request
from .breaker import CLOSED, HALF_OPEN, OPEN, Breakers
from .chains import Stage
from .driver import Driver

log = logging.getLogger("llmbus.scheduler")


@dataclass
class Pipeline:
    name: str
    policy: Scheduler
    driver: Driver | None = None
    chain: list[Stage] | None = None           # its shards now; None while it has no whole chain
    shards: list[str] = field(default_factory=list)   # the shards it last had: kept if live
    gap_since: float | None = None             # since when it has had no whole chain


class Pipelines:
    """Every pipeline; new requests to the least loaded one in rotation, a lost one's to survivors."""

    def __init__(self, assign: Callable[[list[list[str]]], list[list[Stage] | None] | None],
                 make_pipeline: Callable[[str, list[Stage]], Pipeline], breakers: Breakers,
                 clock: Callable[[], float], lost_after_s: float = 5.0):
        self._assign = assign         # (shards of each pipeline) -> a chain or None each; None: pause
        self._make_pipeline = make_pipeline   # (name, its first chain) -> a Pipeline, its driver running
        self.breakers = breakers
        self._clock = clock
        # A shard that misses a few heartbeats (a loaded machine) comes back with its KV intact:
        # only a pipeline gone this long hands its sequences over (a re-prefill elsewhere).
        self.lost_after_s = lost_after_s
        self.pipelines: list[Pipeline] = []
        self._shown: dict[str, tuple] = {}   # what `changes` last reported of each pipeline

    def __iter__(self) -> Iterator[Pipeline]:
        return iter(list(self.pipelines))

    # ---- pipelines ------------------------------------------------------------------------

    def refresh(self, grow: bool = True) -> None:
        """Give each pipeline its chain now and, with `grow`, a new pipeline to each further whole
        chain."""
        got = self._assign([pipeline.shards for pipeline in self.pipelines])
        if got is None:    # a new placement is switching in: no pipeline runs a batch until it serves
            got = [None] * len(self.pipelines)
        now = self._clock()
        for pipeline, chain in zip(self.pipelines, got):
            if (pipeline.chain is None) != (chain is None):
                log.info("pipeline %s: %s", pipeline.name, "no whole chain" if chain is None else
                         f"over {[s.name for s in chain]}")
            pipeline.chain = chain
            if chain is not None:
                pipeline.shards = [s.name for s in chain]
                pipeline.gap_since = None
            elif pipeline.gap_since is None:
                pipeline.gap_since = now
        for chain in got[len(self.pipelines):] if grow else ():
            pipeline = self._make_pipeline(f"p{len(self.pipelines)}", chain)
            pipeline.chain, pipeline.shards = chain, [s.name for s in chain]
            self.pipelines.append(pipeline)
            log.info("pipeline %s over %s", pipeline.name, pipeline.shards)

    def chain_of(self, pipeline: Pipeline) -> list[Stage] | None:
        """A pipeline driver's view of its chain (looked at afresh). New pipelines are not made
        from here, inside a driver's step, but by the service's watch of the pipelines."""
        self.refresh(grow=False)
        return pipeline.chain

    def rebalance(self) -> int:
        """Move the sequences of each pipeline that lost its chain, or was taken out for
        failures, to the pipelines in rotation; returns how many moved."""
        now, moved = self._clock(), 0
        for pipeline in self:
            if not pipeline.policy.has_work() or not self._lost(pipeline, now):
                continue
            survivors = [o for o in self._in_rotation(now) if o is not pipeline]
            if not survivors:
                continue    # nowhere to go: its driver waits for its chain, as a lone pipeline does
            seqs = pipeline.policy.evacuate()
            for seq in sorted(seqs, key=lambda s: s.key):
                min(survivors, key=lambda o: o.policy.load).policy.adopt(seq)
            moved += len(seqs)
            log.warning("pipeline %s: %s; %d sequences move to %s", pipeline.name,
                        self._why_out(pipeline, now), len(seqs), [o.name for o in survivors])
            for o in (pipeline, *survivors):
                if o.driver is not None:
                    o.driver.wake.set()
        return moved

    def observe(self, pipeline: Pipeline, step_s: float | None, error: str) -> None:
        """A pipeline's batch ended (its driver's on_batch): what its breaker counts."""
        now = self._clock()
        was = self.breakers.state(pipeline.name, now)
        if error:
            self.breakers.failure(pipeline.name, now, error)
        else:
            self.breakers.success(pipeline.name, now, step_s)
        if (state := self.breakers.state(pipeline.name, now)) != was:
            log.warning("pipeline %s: breaker %s -> %s %s", pipeline.name, was, state,
                        self.breakers.why(pipeline.name))

    def _lost(self, pipeline: Pipeline, now: float) -> bool:
        if pipeline.chain is None:
            return pipeline.gap_since is not None and now - pipeline.gap_since >= self.lost_after_s
        return self.breakers.state(pipeline.name, now) == OPEN and not self.breakers.slow(pipeline.name)

    def _in_rotation(self, now: float) -> list[Pipeline]:
        """Pipelines with a chain whose breaker is closed, or half-open with no work (a probe)."""
        out = []
        for pipeline in self.pipelines:
            state = self.breakers.state(pipeline.name, now)
            if pipeline.chain is not None and (state == CLOSED or
                                           (state == HALF_OPEN and not pipeline.policy.has_work())):
                out.append(pipeline)
        return out

    def _why_out(self, pipeline: Pipeline, now: float) -> str:
        if pipeline.chain is None:
            return (f"its chain has had a gap for {now - pipeline.gap_since:.1f} s "
                    f"(a shard of {pipeline.shards} is not ready)")
        return self.breakers.why(pipeline.name) or self.breakers.state(pipeline.name, now)

    # ---- requests -------------------------------------------------------------------------

    def submit(self, request: Request):
        """Queue a request on the least loaded pipeline in rotation (else any with a chain, else
        the first: it waits there as on a single pipeline). Raises what `Scheduler.submit` does."""
        now = self._clock()
        pool = self._in_rotation(now) or [p for p in self.pipelines if p.chain is not None] \
            or self.pipelines[:1]
        pipeline = min(pool, key=lambda o: o.policy.load)
        terms = pipeline.policy.submit(request)
        if pipeline.driver is not None:
            pipeline.driver.wake.set()
        return terms

    def pipeline_of(self, request_id: str) -> Pipeline | None:
        return next((p for p in self.pipelines if p.policy.is_tracked(request_id)), None)

    def is_tracked(self, request_id: str) -> bool:
        return self.pipeline_of(request_id) is not None

    def wake(self) -> None:
        for pipeline in self.pipelines:
            if pipeline.driver is not None:
                pipeline.driver.wake.set()

    def fail_all(self, reason: str, code: str) -> list:
        return [o for pipeline in self for o in pipeline.policy.fail_all(reason, code)]

    def idle(self) -> bool:
        return not any(pipeline.policy.inflight for pipeline in self.pipelines)

    @property
    def context_length(self) -> int:
        return min(pipeline.policy.config.context_length for pipeline in self.pipelines)

    # ---- what shows on the bus ------------------------------------------------------------

    def first_pipeline(self) -> list[str]:
        """The first pipeline with a pipeline (the single pipeline's names, where there is one)."""
        return next((pipeline.shards for pipeline in self.pipelines if pipeline.chain is not None),
                    self.pipelines[0].shards if self.pipelines else [])

    def policy_stats(self) -> dict[str, float]:
        """Every pipeline's policy stats summed (ratios made again from the sums)."""
        total: dict[str, float] = {}
        for pipeline in self.pipelines:
            for k, v in pipeline.policy.stats().items():
                total[k] = total.get(k, 0.0) + float(v)
        if total:
            total["page_use"] = total["pages_used"] / total["pages_total"]
            q = total["prefix_query_tokens"]
            total["prefix_hit_rate"] = total["prefix_hit_tokens"] / q if q else 0.0
        return total

    def driver_stats(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pipeline in self.pipelines:
            if pipeline.driver is None:
                continue
            for k, v in pipeline.driver.counters.items():
                out[f"driver.{k}"] = out.get(f"driver.{k}", 0.0) + float(v)
            for k, v in pipeline.driver.timing.items():
                out[f"driver.{k}"] = round(out.get(f"driver.{k}", 0.0) + float(v), 3)
        return out

    def pipeline_stats(self) -> dict[str, float]:
        """Per pipeline: in rotation or not, its load and what moved, as flat numbers."""
        now, out = self._clock(), {"pipelines": float(len(self.pipelines))}
        rotation = self._in_rotation(now)
        for pipeline in self.pipelines:
            s, p = pipeline.policy.stats(), f"pipelines.{pipeline.name}."
            out.update({p + "in_rotation": float(pipeline in rotation),
                        p + "has_pipeline": float(pipeline.chain is not None),
                        p + "breaker_open": float(self.breakers.state(pipeline.name, now) == OPEN),
                        p + "breaker_opens": float(self.breakers.info(pipeline.name, now)["opens"]),
                        p + "running": float(s["running"]), p + "waiting": float(s["waiting"]),
                        p + "inflight": float(len(pipeline.policy.inflight)),
                        p + "moved_in": float(s.get("moved_in", 0)),
                        p + "moved_out": float(s.get("moved_out", 0)),
                        p + "batches_done": float(pipeline.driver.counters["batches_done"]
                                                  if pipeline.driver else 0)})
        return out

    def info(self) -> list[dict]:
        """Each pipeline as the scheduler's status shows it: its shards, whether it takes new
        requests, and if not why."""
        now, rotation = self._clock(), self._in_rotation(self._clock())
        out = []
        for pipeline in self.pipelines:
            s = pipeline.policy.stats()
            entry = {"name": pipeline.name, "shards": pipeline.shards if pipeline.chain is not None else [],
                     "in_rotation": pipeline in rotation, "running": int(s["running"]),
                     "waiting": int(s["waiting"]), "moved_out": int(s.get("moved_out", 0)),
                     **self.breakers.info(pipeline.name, now)}
            if pipeline.chain is None:
                entry["why"] = f"no pipeline: {pipeline.shards} is not whole"
            out.append(entry)
        return out

    def changes(self) -> list[dict]:
        """The `info` entries of the pipelines that came or left (in or out of rotation, breaker
        state, pipeline whole or not, sequences moved out) since the last call: bus events."""
        out = []
        for entry in self.info():
            key = (entry["in_rotation"], entry["state"], bool(entry["shards"]), entry["moved_out"])
            if self._shown.get(entry["name"]) != key:
                self._shown[entry["name"]] = key
                out.append(entry)
        return out
