"""The health watcher's decisions: heartbeats, CPU time, exits and the clock in; kill, respawn or
give up out. Pure: no processes, no sockets, no clock of its own."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from bus.options import option


@dataclass(frozen=True)
class HealthConfig:
    heartbeat_interval: float = 0.5
    heartbeat_misses: int = 3          # dead after this many missed heartbeats ...
    stopped_misses: int = 1            # ... or this many while its process is stopped (SIGSTOP)
    stall_window: float = option(10.0, "a service with work whose progress and CPU time stay "
                                 "still this long is killed and respawned", metavar="SECONDS")
    busy_grace: float = 10.0           # silent but burning CPU (a long native call) this long at most
    backoff_first: float = 0.5         # wait before the second respawn within the budget window
    backoff_max: float = 10.0
    restart_budget: int = option(5, "a service restarted R times within --budget-window is "
                                 "given up (failed)", metavar="R")
    budget_window: float = option(60.0, "see --restart-budget", metavar="SECONDS")

    def __post_init__(self):
        for name in ("heartbeat_interval", "stall_window", "busy_grace", "backoff_first",
                     "backoff_max", "budget_window"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.heartbeat_misses < 1 or self.restart_budget < 1 or self.stopped_misses < 1:
            raise ValueError("heartbeat_misses, stopped_misses and restart_budget must be >= 1")

    @property
    def dead_after(self) -> float:
        return self.heartbeat_interval * self.heartbeat_misses

    @property
    def stopped_after(self) -> float:
        return self.heartbeat_interval * self.stopped_misses


@dataclass(frozen=True)
class Action:
    kind: str          # "kill" (SIGKILL the process), "respawn" (start it again), "give_up"
    name: str
    reason: str


@dataclass(frozen=True)
class Event:
    kind: str          # "service_down", "service_up", "service_failed" (published on the bus)
    name: str
    detail: str


@dataclass
class Watched:
    """What the watcher knows of one service it is responsible for."""

    state: str = "starting"   # starting | up | killing | down | failed
    started_at: float = 0.0
    heard_at: float | None = None
    epoch: int = 0
    load: float = 0.0
    progress: int = 0
    progress_at: float = 0.0
    cpu_s: float = 0.0
    cpu_moved_at: float = 0.0
    stopped: bool = False     # its process was last seen stopped (state T or t in /proc)
    down_at: float = 0.0
    restarts: deque = field(default_factory=deque)   # when it was respawned, within the window
    total_restarts: int = 0
    last_error: str = ""


class HealthPolicy:
    def __init__(self, config: HealthConfig | None = None):
        self.config = config or HealthConfig()
        self.services: dict[str, Watched] = {}
        self._events: list[Event] = []

    # ---- observations -------------------------------------------------------------------
    def started(self, name: str, now: float) -> None:
        """A process for `name` was (re)started."""
        w = self.services.setdefault(name, Watched())
        w.state, w.started_at, w.heard_at, w.stopped = "starting", now, None, False
        w.progress_at = w.cpu_moved_at = now

    def heard(self, name: str, epoch: int, load: float, progress: int, now: float) -> None:
        """A heartbeat of `name` (ignored for a service not watched or not running)."""
        w = self.services.get(name)
        if w is None or w.state not in ("starting", "up"):
            return
        if w.state == "starting" or epoch != w.epoch:
            w.progress_at = now
            if w.state == "starting":
                self._events.append(Event("service_up", name, f"epoch {epoch}"))
            w.state = "up"
        elif progress != w.progress or load <= 0:
            w.progress_at = now       # idle counts as progress: nothing to be stalled on
        w.heard_at, w.epoch, w.load, w.progress = now, epoch, load, progress

    def cpu(self, name: str, seconds: float, now: float) -> None:
        """CPU time the process has used so far (from /proc): a second opinion on liveness."""
        w = self.services.get(name)
        if w is not None and seconds > w.cpu_s:
            w.cpu_s, w.cpu_moved_at = seconds, now

    def stopped(self, name: str, stopped: bool) -> None:
        """Whether the process is stopped now (SIGSTOP, a tracer): it can neither heartbeat nor
        use CPU until continued, so its silence needs no second opinion."""
        w = self.services.get(name)
        if w is not None:
            w.stopped = stopped

    def exited(self, name: str, status: int, now: float) -> None:
        """The process of `name` ended (by itself, or after a kill)."""
        w = self.services.get(name)
        if w is None or w.state in ("down", "failed"):
            return
        if w.state != "killing":
            w.last_error = f"exited with status {status}"
            self._events.append(Event("service_down", name, w.last_error))
        w.state, w.down_at = "down", now
        w.cpu_s, w.stopped = 0.0, False

    # ---- decisions ----------------------------------------------------------------------
    def decide(self, now: float) -> list[Action]:
        """What to do now; call after feeding what was observed."""
        actions = []
        for name, w in self.services.items():
            if w.state in ("starting", "up"):
                why = self._why_kill(w, now)
                if why:
                    w.state, w.last_error = "killing", why
                    self._events.append(Event("service_down", name, why))
                    actions.append(Action("kill", name, why))
            elif w.state == "down":
                while w.restarts and w.restarts[0] <= now - self.config.budget_window:
                    w.restarts.popleft()
                if len(w.restarts) >= self.config.restart_budget:
                    w.state = "failed"
                    why = (f"{len(w.restarts) + 1} failures within {self.config.budget_window:g} s "
                           f"(last: {w.last_error})")
                    self._events.append(Event("service_failed", name, why))
                    actions.append(Action("give_up", name, why))
                elif now >= w.down_at + self.backoff(w):
                    w.restarts.append(now)
                    w.total_restarts += 1
                    actions.append(Action("respawn", name, w.last_error))
        return actions

    def backoff(self, w: Watched) -> float:
        """No wait for the first respawn within the window, then doubling waits."""
        n = len(w.restarts)
        return 0.0 if n == 0 else min(self.config.backoff_first * 2 ** (n - 1), self.config.backoff_max)

    def _why_kill(self, w: Watched, now: float) -> str:
        cfg = self.config
        if w.stopped:
            # Seen stopped: silence is certain, not a late heartbeat; waiting out the full
            # dead_after only delays its respawn.
            silent = now - (w.heard_at if w.heard_at is not None else w.started_at)
            if silent > cfg.stopped_after:
                return f"stopped (SIGSTOP or a tracer) and no heartbeat for {silent:.1f} s"
        busy = now - w.cpu_moved_at <= cfg.dead_after    # its CPU time moved just now
        if w.heard_at is not None:
            silent = now - w.heard_at
            if silent > cfg.dead_after and (not busy or silent > cfg.busy_grace):
                return (f"no heartbeat for {silent:.1f} s ({cfg.heartbeat_misses} missed)"
                        + (", CPU time not moving" if not busy else ""))
        if w.state == "up" and w.load > 0 and now - w.progress_at > cfg.stall_window and not busy:
            return (f"stalled: load {w.load:g}, progress {w.progress} unchanged for "
                    f"{now - w.progress_at:.1f} s, CPU time not moving")
        return ""

    def pop_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def view(self, now: float | None = None) -> dict[str, dict]:
        """State, restarts and last error of each service (what `busctl list` shows). Given the
        clock, an up service with work whose progress has not moved for a heartbeat window
        shows as `stalled` (the stall window has not yet run out, or its CPU time still moves)."""
        return {n: {"state": self._shown_state(w, now), "restarts": w.total_restarts,
                    "last_error": w.last_error} for n, w in self.services.items()}

    def _shown_state(self, w: Watched, now: float | None) -> str:
        if (now is not None and w.state == "up" and w.load > 0
                and now - w.progress_at > self.config.dead_after):
            return "stalled"
        return w.state
