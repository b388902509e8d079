"""Mode 1 of the watcher: it supervises its own child processes (what `llmbus up` runs).

Feeds the policy with the heartbeats its directory hears, the children's exits and their CPU
time, and carries out what the policy decides: SIGKILL, respawn, or give up (marked failed).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from wire.messages.bus import Heartbeat

from .policy import Action, Event, HealthConfig, HealthPolicy
from .procstat import cpu_seconds


class ChildWatcher:
    def __init__(self, kids, directory, config: HealthConfig | None = None,
                 on_event: Callable[[Event], None] = lambda e: None,
                 clock: Callable[[], float] = time.monotonic):
        self.kids = kids                  # services.cli.children.Children
        self.policy = HealthPolicy(config)
        self._on_event = on_event
        self._clock = clock
        now = clock()
        for name in kids.by_name:
            self.policy.started(name, now)
        directory.on_event.append(self._heard)

    def _heard(self, topic: bytes, msg) -> None:
        hb = msg.body
        if isinstance(hb, Heartbeat) and hb.name in self.kids.by_name:
            self.policy.heard(hb.name, hb.epoch, hb.load, hb.progress, self._clock())

    def tick(self) -> list[Action]:
        """Look at every child once, act on what the policy decides; returns the actions."""
        now = self._clock()
        for name, p in list(self.kids.by_name.items()):
            if p.poll() is not None:
                self.policy.exited(name, p.returncode, now)
            elif (cpu := cpu_seconds(p.pid)) is not None:
                self.policy.cpu(name, cpu, now)
        actions = self.policy.decide(now)
        for a in actions:
            p = self.kids.by_name[a.name]
            if a.kind == "kill" and p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()                 # a killed child is reaped now: its exit is seen next tick
            elif a.kind == "respawn":
                self.kids.respawn(a.name)
                self.policy.started(a.name, now)
        for e in self.policy.pop_events():
            self._on_event(e)
        return actions

    def failed(self) -> list[str]:
        return [n for n, v in self.policy.view().items() if v["state"] == "failed"]
