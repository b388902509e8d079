"""The watcher's loop body: heartbeats of this machine's services and what the mode observes in,
the policy's decisions carried out by the mode, service events out.

A mode is how this machine runs its services: `ChildrenMode` (the watcher spawned them) or
`SystemdMode` (units run them). The watcher itself holds no process or socket.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from wire.messages.bus import Heartbeat
from wire.messages.health import ServiceEvent, Watched
from wire.messages.info import FailedService

from .policy import Action, HealthConfig, HealthPolicy


class UnknownService(LookupError):
    """`busctl kill NAME` for a service this watcher does not run."""


class Mode(Protocol):
    name: str

    def owns(self, hb: Heartbeat) -> bool: ...
    def observe(self, policy: HealthPolicy, now: float) -> None: ...
    def act(self, action: Action) -> None: ...
    def pid(self, name: str) -> int | None: ...
    def unit(self, name: str) -> str: ...
    def signal(self, name: str, signum: int) -> int: ...


class Watcher:
    def __init__(self, mode: Mode, config: HealthConfig, publish: Callable[[ServiceEvent], None],
                 me: str, machine: str, clock: Callable[[], float] = time.monotonic):
        self.mode = mode
        self.policy = HealthPolicy(config)
        self.me, self.machine = me, machine
        self._publish = publish
        self._clock = clock
        self.last: dict[str, tuple[str, dict]] = {}   # each watched service's kind and last info

    def started(self, name: str) -> None:
        """The mode started `name`'s process (first start: a child spawned)."""
        self.policy.started(name, self._clock())

    def heard(self, hb: Heartbeat) -> None:
        """A heartbeat anyone on the bus sent; kept if it is one of this machine's services."""
        if hb.name == self.me or not self.mode.owns(hb):
            return
        if hb.name not in self.policy.services:          # under systemd: first heard, now watched
            self.policy.started(hb.name, self._clock())
        self.last[hb.name] = (hb.kind, dict(hb.info))
        self.policy.heard(hb.name, hb.epoch, hb.load, hb.progress, self._clock())

    def tick(self) -> list[Action]:
        """Observe, decide, act once; returns what was done."""
        now = self._clock()
        self.mode.observe(self.policy, now)
        actions = self.policy.decide(now)
        for a in actions:
            self.mode.act(a)
            if a.kind == "respawn":
                self.policy.started(a.name, now)
        for e in self.policy.pop_events():
            w = self.policy.services[e.name]
            kind, info = self.last.get(e.name, ("", {}))
            self._publish(ServiceEvent(kind=e.kind, service=e.name, reason=e.detail,
                                       watcher=self.me, machine=self.machine,
                                       restarts=w.total_restarts, service_kind=kind, info=info))
        return actions

    def kill(self, name: str, signum: int) -> int:
        """Send `signum` to the process of `name`; returns its pid."""
        if name not in self.policy.services:
            raise UnknownService(f"{self.me} does not watch {name!r} (it watches "
                                 f"{', '.join(sorted(self.policy.services)) or 'nothing yet'})")
        return self.mode.signal(name, signum)

    def status(self) -> list[Watched]:
        view = self.policy.view(self._clock())
        return [Watched(name=n, state=v["state"], restarts=v["restarts"],
                        last_error=v["last_error"], pid=self.mode.pid(n) or 0,
                        unit=self.mode.unit(n)) for n, v in sorted(view.items())]

    def failed(self) -> dict[str, FailedService]:
        """Services given up: why, and their last heartbeat info (a shard's layers and model),
        so that a scheduler or gateway that missed the event still knows what is gone."""
        return {n: FailedService(w.last_error, *self.last.get(n, ("", {})))
                for n, w in self.policy.services.items() if w.state == "failed"}
