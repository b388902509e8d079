"""Mode `children` of the watcher: it runs the services itself, as child processes (what
`llmbus up` does), sees their exits and CPU time directly, kills with SIGKILL and respawns."""

from __future__ import annotations

import os
import signal

from wire.messages.bus import Heartbeat

from .policy import Action, HealthPolicy
from .procstat import sample


class ChildrenMode:
    name = "children"

    def __init__(self, kids, specs: dict[str, list[str]], stop_first: tuple[str, ...] = ()):
        self.kids = kids                  # processes.Children
        self.specs = dict(specs)          # name -> `llmbus` arguments
        self.stop_first = stop_first      # stopped (and drained) before the others

    def start_all(self) -> list[str]:
        for name, args in self.specs.items():
            self.kids.start(name, args)
        return list(self.specs)

    def prepare_respawns(self) -> None:
        """Warm a fork server, so that a respawned child skips the interpreter's imports."""
        self.kids.fork_respawns()

    def stop_all(self) -> None:
        self.kids.stop(first=self.stop_first)

    def owns(self, hb: Heartbeat) -> bool:
        return hb.name in self.kids.by_name

    def observe(self, policy: HealthPolicy, now: float) -> None:
        for name, p in list(self.kids.by_name.items()):
            if p.poll() is not None:
                policy.exited(name, p.returncode, now)
            elif (s := sample(p.pid)) is not None:
                policy.cpu(name, s.cpu_s, now)
                policy.stopped(name, s.stopped)

    def act(self, a: Action) -> None:
        p = self.kids.by_name[a.name]
        if a.kind == "kill" and p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()                 # a killed child is reaped now: its exit is seen next tick
        elif a.kind == "respawn":
            self.kids.respawn(a.name)

    def pid(self, name: str) -> int | None:
        p = self.kids.by_name.get(name)
        return p.pid if p is not None and p.poll() is None else None

    def unit(self, name: str) -> str:
        return ""

    def signal(self, name: str, signum: int) -> int:
        p = self.kids.by_name[name]
        if p.poll() is not None:
            raise ProcessLookupError(f"{name} is not running (exited with status {p.returncode})")
        os.kill(p.pid, signum)
        return p.pid
