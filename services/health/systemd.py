"""Mode `systemd` of the watcher: units run this machine's services; the watcher learns their
pids from heartbeats, judges them with the same policy and asks systemd to act.

A silent or stalled service is killed with `systemctl kill --signal=SIGKILL` (a stop would wait
`TimeoutStopSec` on a stopped process); it comes back by `systemctl restart`, which systemd
counts against the unit's start limits, so a unit that keeps failing ends `failed` in systemd as
it does on the bus.

It acts only on what it owns: the `llmbus-*` units `llmbus install-units` wrote for this machine
(given as `--watch-unit`, kept in the watcher's own config), each bound to the first service name whose
heartbeat names it. A heartbeat's pid is believed only when /proc says it is that unit's main
process (in the unit's cgroup, its parent outside it), checked again before any signal: a
heartbeat never names what to kill or restart.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable

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


UNIT_PREFIX = "llmbus-"
UNIT_SUFFIX = ".service"


def check_units(units: Iterable[str]) -> frozenset[str]:
    """The units a watcher may act on: `llmbus-*.service` names only (ValueError otherwise)."""
    out = frozenset(units)
    for u in out:
        if (not u.startswith(UNIT_PREFIX) or not u.endswith(UNIT_SUFFIX) or "/" in u
                or any(c.isspace() for c in u)):
            raise ValueError(f"--watch-unit {u!r}: the watcher acts only on llmbus-*.service units")
    return out


def cgroup_of(pid: int, proc: str = "/proc") -> str | None:
    """The cgroup (v2 path, or the systemd hierarchy's of v1) of `pid`; None if unknown."""
    try:
        with open(f"{proc}/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (hid == "0" and controllers == "") or controllers == "name=systemd":
            return path
    return None


def parent_of(pid: int, proc: str = "/proc") -> int | None:
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def is_main_process(pid: int, unit: str, proc: str = "/proc") -> bool:
    """/proc says `pid` is `unit`'s main process: in the unit's cgroup, and its parent is not."""
    if pid <= 1:
        return False
    cg = cgroup_of(pid, proc)
    if cg is None or cg.rstrip("/").rsplit("/", 1)[-1] != unit:
        return False
    ppid = parent_of(pid, proc)
    return ppid is not None and cgroup_of(ppid, proc) != cg


class SystemdMode:
    name = "systemd"

    def __init__(self, machine: str, units: Iterable[str] = (),
                 run: Callable[[list[str]], None] | None = None,
                 is_main: Callable[[int, str], bool] = is_main_process):
        self.machine = machine
        self.owned = check_units(units)   # the units install-units wrote for this machine
        self._run = run or _spawn
        self._is_main = is_main
        self.units: dict[str, str] = {}   # service name -> its unit (one of `owned`)
        self.pids: dict[str, int] = {}
        self.errors: list[str] = []
        self.refused = 0                  # heartbeats naming a unit or pid not ours

    def owns(self, hb: Heartbeat) -> bool:
        if hb.machine != self.machine or hb.unit not in self.owned:
            return False
        bound = self.units.get(hb.name)
        holder = next((n for n, u in self.units.items() if u == hb.unit), None)
        if (bound is not None and bound != hb.unit) or (holder is not None and holder != hb.name):
            self.refused += 1             # a unit runs one service name, for good
            return False
        if not self._is_main(hb.pid, hb.unit):
            self.refused += 1
            return False
        self.units[hb.name] = hb.unit
        self.pids[hb.name] = hb.pid
        return True

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
        unit = self.units.get(a.name)
        if unit not in self.owned:        # never: units are bound from `owned` alone
            return
        for argv in commands(a, unit):
            try:
                self._run(argv)
            except OSError as e:
                self.errors.append(f"{' '.join(argv)}: {e}")
                del self.errors[:-16]

    def pid(self, name: str) -> int | None:
        return self.pids.get(name)

    def unit(self, name: str) -> str:
        return self.units.get(name, "")

    def signal(self, name: str, signum: int) -> int:
        pid = self.pids.get(name)
        if pid is None:
            raise ProcessLookupError(f"{name} has no known process (no heartbeat since it went down)")
        if not self._is_main(pid, self.units.get(name, "")):   # exited, its pid maybe reused
            del self.pids[name]
            raise ProcessLookupError(f"{name}: pid {pid} is no longer its unit's main process")
        os.kill(pid, signum)
        return pid


def _spawn(argv: list[str]) -> None:
    # Never waits: systemctl may block on a job; the next heartbeats tell what happened.
    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
