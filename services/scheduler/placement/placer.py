"""The scheduler's placer: runs the placement policy against the shards on the bus.

Shards started without `--layers` offer their memory in their heartbeats. When the policy
(placement.decide) wants a new plan, every member loads its new range beside the one it serves
(`shard.place`); once all have, the placer pauses the pipeline at a batch boundary (no new
batch while batches in flight finish), switches every member (`shard.switch`), and lets the
driver go on: the pipeline's signature changed, so it re-prefills what was in flight. Requests
pause; none fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from bus.errors import BusError, RemoteError
from services.modelstore.footprint import Footprint
from wire.messages.placement import FootprintRequest, Place, Switch

from .policy import Member, Plan, PlacementRefused, decide

log = logging.getLogger("llmbus.scheduler")


class Placer:
    """Owns the plan in force; `paused` tells the scheduler's chain to offer no pipeline."""

    def __init__(self, directory, call: Callable, model: Callable[[], str], idle: Callable[[], bool],
                 wake: Callable[[], None], served: Callable[[], int], *, settle_s: float = 1.0,
                 poll_s: float = 0.1, load_timeout: float = 300.0, idle_timeout: float = 120.0,
                 grace_s: float = 2.0):
        self.directory = directory
        self._call = call              # async (name, body, timeout) -> reply
        self._model = model            # the model identity served
        self._idle = idle              # no batch in flight
        self._wake = wake              # wake the driver
        self._served = served          # batches completed so far
        self.settle_s = settle_s       # a joined shard is placed once it has been live this long
        self.poll_s = poll_s
        # A member of the plan out of sight this long is lost; a shorter silence (a shard
        # loading its next range, a stalled host) brings no new plan.
        self.grace_s = grace_s
        self._last_member: dict[str, tuple[float, Member]] = {}
        self.load_timeout = load_timeout
        self.idle_timeout = idle_timeout
        self.plan: Plan | None = None
        self.plan_id = 0               # the plan in force
        self._next_id = 0              # the last plan tried (a plan whose loads fail is dropped)
        self.paused = False
        self.footprint: Footprint | None = None
        self.refused = ""              # why the model does not fit, while it does not
        self.history: list[dict] = []  # one entry per plan put in force
        self._first_seen: dict[tuple[str, int], float] = {}
        self._said = ""

    # ------------------------------------------------------------------ what the scheduler reads
    def stages_allowed(self, entries) -> list:
        """The shard entries a pipeline may be built from: while a plan is in force, its members
        serving that plan; with none, the pinned shards (no `memory` offered)."""
        if self.plan is None:
            return [e for e in entries if not e.info.memory]
        return [e for e in entries if e.name in self.plan.names and e.info.plan == self.plan_id]

    def info(self) -> dict:
        out = {"plan": self.plan_id,
               "ranges": [list(r) for r in self.plan.ranges] if self.plan else [],
               "paused": self.paused}
        if self.refused:
            out["refused"] = self.refused
        if self.history:
            last = dict(self.history[-1])
            served_at = last.pop("_served_at", None)
            last["serving"] = self._served() > last.pop("_batches_at_switch")
            if served_at is not None:
                last["detect_to_serving_s"] = round(served_at - last["_detected"], 3)
            last.pop("_detected")
            out["last_change"] = last
        return out

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        while True:
            try:
                await self._step()
                self._note_serving()
            except asyncio.CancelledError:
                raise
            except Exception:   # a bug here must not end placement for good
                log.exception("placement step failed")
            await asyncio.sleep(self.poll_s)

    def _note_serving(self) -> None:
        if self.history and "_served_at" not in self.history[-1] and \
                self._served() > self.history[-1]["_batches_at_switch"]:
            self.history[-1]["_served_at"] = time.monotonic()

    def _members(self) -> tuple[list[Member], dict]:
        now = time.monotonic()
        model = self._model()
        entries = {e.name: e for e in self.directory.of_kind("shard")
                   if e.state == "ready" and e.info.memory and e.info.model == model}
        members = []
        for e in entries.values():
            seen = self._first_seen.setdefault((e.name, e.epoch), now)
            # A newcomer waits to settle (its siblings starting beside it join the same plan);
            # a member of the plan in force counts at once.
            if now - seen >= self.settle_s or (self.plan is not None and e.name in self.plan.names):
                members.append(Member(e.name, e.info.memory, e.info.kv_per_layer, e.info.weight_scale))
                self._last_member[e.name] = (now, members[-1])
        if self.plan is not None:
            have = {m.name for m in members}
            members += [m for n, (at, m) in self._last_member.items()
                        if n in self.plan.names and n not in have and now - at < self.grace_s]
        return members, entries

    async def _step(self) -> None:
        members, entries = self._members()
        if not members:
            return
        if self.footprint is None:
            self.footprint = await self._fetch_footprint(members[0].name)
        detected = time.monotonic()
        try:
            d = decide(self.footprint, self.plan, members)
        except PlacementRefused as e:
            self.refused = f"{self._model()} does not fit the shards offered: {e}"
            self._say(self.refused)
            return
        self.refused = ""
        plan, reason = d.plan, d.reason
        if plan is None:
            # The same plan, but a member restarted (a new epoch serves no plan): place it again.
            restarted = sorted(n for n in self.plan.names
                               if n in entries and entries[n].info.plan != self.plan_id)
            if not restarted:
                return
            plan, reason = self.plan, f"restarted {', '.join(restarted)}"
        await self._apply(plan, reason, detected)

    async def _fetch_footprint(self, name: str) -> Footprint:
        r = await self._call(name, FootprintRequest(), 10.0)
        return Footprint(layer_bytes=tuple(r.layer_bytes), first_bytes=r.first_bytes,
                         last_bytes=r.last_bytes, kv_heads=r.kv_heads, head_dim=r.head_dim)

    async def _apply(self, plan: Plan, reason: str, detected: float) -> None:
        self._next_id = max(self._next_id, self.plan_id) + 1
        pid = self._next_id
        log.info("placement plan %d (%s): %s", pid, reason,
                 ", ".join(f"{n} {a}:{b}" for n, a, b in plan.ranges))
        t0 = time.monotonic()
        loads = await asyncio.gather(*(self._place(n, Place(plan=pid, start=a, end=b))
                                       for n, a, b in plan.ranges), return_exceptions=True)
        failed = [(n, r) for (n, _, _), r in zip(plan.ranges, loads) if isinstance(r, BaseException)]
        if failed:
            # A member died or refused while loading: the next step plans without it.
            log.warning("placement plan %d dropped: %s", pid, "; ".join(f"{n}: {r}" for n, r in failed))
            return
        loaded = time.monotonic()
        self.paused = True     # the batch boundary: no new batch while those in flight finish
        try:
            deadline = loaded + self.idle_timeout
            while not self._idle() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            switched = await asyncio.gather(*(self._call(n, Switch(plan=pid), 10.0)
                                              for n, _, _ in plan.ranges), return_exceptions=True)
            self.plan, self.plan_id = plan, pid
            bad = [n for (n, _, _), r in zip(plan.ranges, switched) if isinstance(r, BaseException)]
            if bad:
                log.warning("placement plan %d: %s did not switch", pid, ", ".join(bad))
            # Serve once the bus shows every member on its new range (the driver builds its
            # pipeline from heartbeats).
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and not self._announced(plan, pid):
                await asyncio.sleep(0.01)
        finally:
            self.paused = False
            self._wake()
        self.history.append({"plan": pid, "reason": reason, "load_s": round(loaded - t0, 3),
                             "detect_to_switch_s": round(time.monotonic() - detected, 3),
                             "_detected": detected, "_batches_at_switch": self._served()})
        del self.history[:-8]
        log.info("placement plan %d in force (%s)", pid, reason)

    async def _place(self, name: str, body: Place):
        """Ask `name` to load its range, again while it stays live: a shard busy loading may
        miss heartbeats, and the call fails though the load goes on (the shard answers a
        repeated ask from the same load)."""
        deadline = time.monotonic() + self.load_timeout
        while True:
            try:
                return await self._call(name, body, max(deadline - time.monotonic(), 0.1))
            except BusError as e:
                if isinstance(e, RemoteError) or time.monotonic() >= deadline:
                    raise   # the shard refused: asking again cannot help
                back = time.monotonic() + self.grace_s
                while self.directory.get(name) is None and time.monotonic() < back:
                    await asyncio.sleep(0.05)
                if self.directory.get(name) is None:
                    raise

    def _announced(self, plan: Plan, pid: int) -> bool:
        live = {e.name: e for e in self.directory.of_kind("shard")}
        return all(n in live and live[n].info.plan == pid and live[n].info.layers == (a, b)
                   for n, a, b in plan.ranges)

    def _say(self, text: str) -> None:
        if text != self._said:
            log.error("%s", text)
            self._said = text

