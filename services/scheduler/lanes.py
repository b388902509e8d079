"""The scheduler's pipelines at run time: one policy and one driver per pipeline ("lane").

Each lane's sequences hold KV in its own shards, so a request stays on the lane it was given:
the least loaded one in rotation. A lane that loses its pipeline (a replica died and no spare
replaces it), or whose breaker opened for failures, hands its sequences to the survivors, where
they are prefilled again from prompt + generated tokens: the client sees only a pause. One lane
behaves as the single pipeline always did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .breaker import CLOSED, HALF_OPEN, OPEN, Breakers
from .driver import Driver
from .pipeline import Stage
from .policy import Scheduler
from .sequence import Request

log = logging.getLogger("llmbus.scheduler")


@dataclass
class Lane:
    name: str
    policy: Scheduler
    driver: Driver | None = None
    chain: list[Stage] | None = None           # its pipeline now; None while it has none
    shards: list[str] = field(default_factory=list)   # the shards it last had: kept if live
    gap_since: float | None = None             # since when it has had no pipeline


class Lanes:
    """Every lane; new requests to the least loaded one in rotation, a lost one's to survivors."""

    def __init__(self, assign: Callable[[list[list[str]]], list[list[Stage] | None] | None],
                 make_lane: Callable[[str, list[Stage]], Lane], breakers: Breakers,
                 clock: Callable[[], float], lost_after_s: float = 5.0):
        self._assign = assign         # (shards of each lane) -> a chain or None each; None: pause
        self._make_lane = make_lane   # (name, its first chain) -> a Lane with its driver running
        self.breakers = breakers
        self._clock = clock
        # A shard that misses a few heartbeats (a loaded machine) comes back with its KV intact:
        # only a pipeline gone this long hands its sequences over (a re-prefill elsewhere).
        self.lost_after_s = lost_after_s
        self.lanes: list[Lane] = []
        self._shown: dict[str, tuple] = {}   # what `changes` last reported of each lane

    def __iter__(self) -> Iterator[Lane]:
        return iter(list(self.lanes))

    # ---- pipelines ------------------------------------------------------------------------

    def refresh(self, grow: bool = True) -> None:
        """Give each lane its pipeline now and, with `grow`, a new lane to each further whole chain."""
        got = self._assign([lane.shards for lane in self.lanes])
        if got is None:    # a new placement is switching in: no lane runs a batch until it serves
            got = [None] * len(self.lanes)
        now = self._clock()
        for lane, chain in zip(self.lanes, got):
            if (lane.chain is None) != (chain is None):
                log.info("pipeline %s: %s", lane.name, "no pipeline" if chain is None else
                         f"over {[s.name for s in chain]}")
            lane.chain = chain
            if chain is not None:
                lane.shards = [s.name for s in chain]
                lane.gap_since = None
            elif lane.gap_since is None:
                lane.gap_since = now
        for chain in got[len(self.lanes):] if grow else ():
            lane = self._make_lane(f"p{len(self.lanes)}", chain)
            lane.chain, lane.shards = chain, [s.name for s in chain]
            self.lanes.append(lane)
            log.info("pipeline %s over %s", lane.name, lane.shards)

    def chain_of(self, lane: Lane) -> list[Stage] | None:
        """A lane driver's view of its pipeline (looked at afresh). New lanes are not made from
        here, inside a driver's step, but by the service's watch of the lanes."""
        self.refresh(grow=False)
        return lane.chain

    def rebalance(self) -> int:
        """Move the sequences of each lane that lost its pipeline, or was taken out for
        failures, to the lanes in rotation; returns how many moved."""
        now, moved = self._clock(), 0
        for lane in self:
            if not lane.policy.has_work() or not self._lost(lane, now):
                continue
            survivors = [o for o in self._in_rotation(now) if o is not lane]
            if not survivors:
                continue    # nowhere to go: its driver waits for its pipeline, as one lane does
            seqs = lane.policy.evacuate()
            for seq in sorted(seqs, key=lambda s: s.key):
                min(survivors, key=lambda o: o.policy.load).policy.adopt(seq)
            moved += len(seqs)
            log.warning("pipeline %s: %s; %d sequences move to %s", lane.name,
                        self._why_out(lane, now), len(seqs), [o.name for o in survivors])
            for o in (lane, *survivors):
                if o.driver is not None:
                    o.driver.wake.set()
        return moved

    def observe(self, lane: Lane, step_s: float | None, error: str) -> None:
        """A lane's batch ended (its driver's on_batch): what its breaker counts."""
        now = self._clock()
        was = self.breakers.state(lane.name, now)
        if error:
            self.breakers.failure(lane.name, now, error)
        else:
            self.breakers.success(lane.name, now, step_s)
        if (state := self.breakers.state(lane.name, now)) != was:
            log.warning("pipeline %s: breaker %s -> %s %s", lane.name, was, state,
                        self.breakers.why(lane.name))

    def _lost(self, lane: Lane, now: float) -> bool:
        if lane.chain is None:
            return lane.gap_since is not None and now - lane.gap_since >= self.lost_after_s
        return self.breakers.state(lane.name, now) == OPEN and not self.breakers.slow(lane.name)

    def _in_rotation(self, now: float) -> list[Lane]:
        """Lanes with a pipeline whose breaker is closed, or half-open with no work (a probe)."""
        out = []
        for lane in self.lanes:
            state = self.breakers.state(lane.name, now)
            if lane.chain is not None and (state == CLOSED or
                                           (state == HALF_OPEN and not lane.policy.has_work())):
                out.append(lane)
        return out

    def _why_out(self, lane: Lane, now: float) -> str:
        if lane.chain is None:
            return (f"its pipeline has had a gap for {now - lane.gap_since:.1f} s "
                    f"(a shard of {lane.shards} is not ready)")
        return self.breakers.why(lane.name) or self.breakers.state(lane.name, now)

    # ---- requests -------------------------------------------------------------------------

    def submit(self, request: Request):
        """Queue a request on the least loaded lane in rotation (else any with a pipeline, else
        the first: it waits there as on a single pipeline). Raises what `Scheduler.submit` does."""
        now = self._clock()
        pool = self._in_rotation(now) or [lane for lane in self.lanes if lane.chain is not None] \
            or self.lanes[:1]
        lane = min(pool, key=lambda o: o.policy.load)
        terms = lane.policy.submit(request)
        if lane.driver is not None:
            lane.driver.wake.set()
        return terms

    def lane_of(self, request_id: str) -> Lane | None:
        return next((lane for lane in self.lanes if lane.policy.is_tracked(request_id)), None)

    def is_tracked(self, request_id: str) -> bool:
        return self.lane_of(request_id) is not None

    def wake(self) -> None:
        for lane in self.lanes:
            if lane.driver is not None:
                lane.driver.wake.set()

    def fail_all(self, reason: str) -> list:
        return [o for lane in self for o in lane.policy.fail_all(reason)]

    def idle(self) -> bool:
        return not any(lane.policy.inflight for lane in self.lanes)

    @property
    def context_length(self) -> int:
        return min(lane.policy.config.context_length for lane in self.lanes)

    # ---- what shows on the bus ------------------------------------------------------------

    def first_pipeline(self) -> list[str]:
        """The first lane with a pipeline (the single pipeline's names, where there is one)."""
        return next((lane.shards for lane in self.lanes if lane.chain is not None),
                    self.lanes[0].shards if self.lanes else [])

    def policy_stats(self) -> dict[str, float]:
        """Every lane's policy stats summed (ratios made again from the sums)."""
        total: dict[str, float] = {}
        for lane in self.lanes:
            for k, v in lane.policy.stats().items():
                total[k] = total.get(k, 0.0) + float(v)
        if total:
            total["page_use"] = total["pages_used"] / total["pages_total"]
            q = total["prefix_query_tokens"]
            total["prefix_hit_rate"] = total["prefix_hit_tokens"] / q if q else 0.0
        return total

    def driver_stats(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for lane in self.lanes:
            if lane.driver is None:
                continue
            for k, v in lane.driver.counters.items():
                out[f"driver.{k}"] = out.get(f"driver.{k}", 0.0) + float(v)
            for k, v in lane.driver.timing.items():
                out[f"driver.{k}"] = round(out.get(f"driver.{k}", 0.0) + float(v), 3)
        return out

    def lane_stats(self) -> dict[str, float]:
        """Per lane: in rotation or not, its load and what moved, as flat numbers."""
        now, out = self._clock(), {"pipelines": float(len(self.lanes))}
        rotation = self._in_rotation(now)
        for lane in self.lanes:
            s, p = lane.policy.stats(), f"pipelines.{lane.name}."
            out.update({p + "in_rotation": float(lane in rotation),
                        p + "has_pipeline": float(lane.chain is not None),
                        p + "breaker_open": float(self.breakers.state(lane.name, now) == OPEN),
                        p + "breaker_opens": float(self.breakers.info(lane.name, now)["opens"]),
                        p + "running": float(s["running"]), p + "waiting": float(s["waiting"]),
                        p + "moved_in": float(s.get("moved_in", 0)),
                        p + "moved_out": float(s.get("moved_out", 0)),
                        p + "batches_done": float(lane.driver.counters["batches_done"]
                                                  if lane.driver else 0)})
        return out

    def info(self) -> list[dict]:
        """Each lane as the scheduler's status shows it: its shards, whether it takes new
        requests, and if not why."""
        now, rotation = self._clock(), self._in_rotation(self._clock())
        out = []
        for lane in self.lanes:
            s = lane.policy.stats()
            entry = {"name": lane.name, "shards": lane.shards if lane.chain is not None else [],
                     "in_rotation": lane in rotation, "running": int(s["running"]),
                     "waiting": int(s["waiting"]), "moved_out": int(s.get("moved_out", 0)),
                     **self.breakers.info(lane.name, now)}
            if lane.chain is None:
                entry["why"] = f"no pipeline: {lane.shards} is not whole"
            out.append(entry)
        return out

    def changes(self) -> list[dict]:
        """The `info` entries of the lanes that came or left (in or out of rotation, breaker
        state, pipeline whole or not, sequences moved out) since the last call: bus events."""
        out = []
        for entry in self.info():
            key = (entry["in_rotation"], entry["state"], bool(entry["shards"]), entry["moved_out"])
            if self._shown.get(entry["name"]) != key:
                self._shown[entry["name"]] = key
                out.append(entry)
        return out
