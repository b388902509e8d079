"""Mode `systemd` of the watcher: units run this machine's services; the watcher learns their
pids from heartbeats, judges them with the same policy and asks systemd to act.

A silent or stalled service is killed with `systemctl kill --signal=SIGKILL` (a stop would wait
`TimeoutStopSec` on a stopped process); it comes back by `systemctl restart`, which systemd
counts against the unit's start limits, so a unit that keeps failing ends `failed` in systemd as
it does on the bus.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from wire.messages.bus import Heartbeat

from .policy import Action, HealthPolicy
from .procstat import sample


def commands(action: Action, unit: str) -> list[list[str]]:
    """The systemctl command lines that carry out `action` on `unit`."""
    if action.kind == "kill":
        return [["systemctl", "kill", "--signal=SIGKILL", "--kill-whom=main", unit]]
    if action.kind == "respawn":
        return [["systemctl", "restart", "--no-block", unit]]
    return []   # give_up: systemd's start limits have failed the unit, or will at its next exit


class SystemdMode:
    name = "systemd"

    def __init__(self, machine: str, run: Callable[[list[str]], None] | None = None):
        self.machine = machine
        self._run = run or _spawn
        self.units: dict[str, str] = {}   # service name -> unit
        self.pids: dict[str, int] = {}
        self.errors: list[str] = []

    def owns(self, hb: Heartbeat) -> bool:
        mine = hb.machine == self.machine and bool(hb.unit)
        if mine:
            self.units[hb.name] = hb.unit
            self.pids[hb.name] = hb.pid
        return mine

    def observe(self, policy: HealthPolicy, now: float) -> None:
        for name, pid in list(self.pids.items()):
            w = policy.services.get(name)
            if w is None or w.state not in ("starting", "up", "killing"):
                continue
            s = sample(pid)
            if s is None:         # the process is gone (systemd may already be restarting it)
                policy.exited(name, -1, now)
                del self.pids[name]
            else:
                policy.cpu(name, s.cpu_s, now)
                policy.stopped(name, s.stopped)

    def act(self, a: Action) -> None:
        for argv in commands(a, self.units[a.name]):
            try:
                self._run(argv)
            except OSError as e:
                self.errors.append(f"{' '.join(argv)}: {e}")

    def pid(self, name: str) -> int | None:
        return self.pids.get(name)

    def unit(self, name: str) -> str:
        return self.units.get(name, "")

    def signal(self, name: str, signum: int) -> int:
        pid = self.pids.get(name)
        if pid is None:
            raise ProcessLookupError(f"{name} has no known process (no heartbeat since it went down)")
        os.kill(pid, signum)
        return pid


def _spawn(argv: list[str]) -> None:
    # Never waits: systemctl may block on a job; the next heartbeats tell what happened.
    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
