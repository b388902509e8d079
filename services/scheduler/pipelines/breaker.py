"""Circuit breakers over pipelines: one that keeps failing, or is much slower than the others,
is taken out of rotation for a cool-down, then given a probe. Pure: the caller passes the time.

closed ──(`failures` in `window_s`, or step time `slow_factor`× the best other's)──> open
open ──(cool-down passed)──> half_open ──(a batch served)──> closed
                                       ──(a failure, or slow again)──> open, cool-down doubled
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


@dataclass(frozen=True)
class BreakerConfig:
    failures: int = 3              # failed batches within window_s that open the breaker
    window_s: float = 30.0
    cooldown_s: float = 10.0       # the first time out of rotation; doubles on each reopening
    max_cooldown_s: float = 120.0
    slow_factor: float = 3.0       # a step time this many times the best other pipeline's is slow
    slow_samples: int = 8          # decode steps a pipeline needs before it is compared
    smoothing: float = 0.2         # weight of the newest step in the moving average

    def __post_init__(self):
        if self.failures < 1 or self.slow_samples < 1:
            raise ValueError("failures and slow_samples must be >= 1")
        if min(self.window_s, self.cooldown_s, self.max_cooldown_s) <= 0 or self.slow_factor <= 1:
            raise ValueError("window_s, cooldown_s and max_cooldown_s must be > 0, slow_factor > 1")
        if not 0 < self.smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")


@dataclass
class _State:
    failed_at: deque = field(default_factory=deque)
    opened_until: float | None = None   # None: not open (closed, or half-open once it passed)
    tripped: bool = False               # opened at least once and not closed since
    cooldown: float = 0.0
    why: str = ""
    slow: bool = False                  # opened for slowness, not failures
    step_s: float = 0.0                 # moving average of decode step seconds
    steps: int = 0
    opens: int = 0


class Breakers:
    """One breaker per pipeline key."""

    def __init__(self, config: BreakerConfig | None = None):
        self.config = config or BreakerConfig()
        self._s: dict[str, _State] = {}

    def state(self, key: str, now: float) -> str:
        s = self._s.get(key)
        if s is None or not s.tripped:
            return CLOSED
        return OPEN if s.opened_until is not None and now < s.opened_until else HALF_OPEN

    def why(self, key: str) -> str:
        """Why it was last opened ("" if it never was, or closed since)."""
        s = self._s.get(key)
        return s.why if s is not None and s.tripped else ""

    def slow(self, key: str) -> bool:
        """Out for slowness (its sequences may finish there), not for failures."""
        s = self._s.get(key)
        return s is not None and s.tripped and s.slow

    def failure(self, key: str, now: float, what: str = "") -> None:
        """A batch on this pipeline failed."""
        s = self._get(key)
        if self.state(key, now) == HALF_OPEN:
            self._open(s, now, f"the probe failed: {what}" if what else "the probe failed", False)
            return
        s.failed_at.append(now)
        while s.failed_at and s.failed_at[0] <= now - self.config.window_s:
            s.failed_at.popleft()
        if len(s.failed_at) >= self.config.failures and self.state(key, now) == CLOSED:
            self._open(s, now, f"{len(s.failed_at)} failed batches within "
                               f"{self.config.window_s:g} s" + (f" (last: {what})" if what else ""),
                       False)

    def success(self, key: str, now: float, step_s: float | None = None) -> None:
        """A batch on this pipeline was served; `step_s`: its time, for a decode-only batch."""
        s = self._get(key)
        if step_s is not None:
            c = self.config
            s.step_s = step_s if s.steps == 0 else (1 - c.smoothing) * s.step_s + c.smoothing * step_s
            s.steps += 1
            if (slow := self._slowness(key)) is not None and self.state(key, now) != OPEN:
                self._open(s, now, slow, True)
                return
        if self.state(key, now) == HALF_OPEN:
            s.tripped, s.why, s.cooldown = False, "", 0.0
            s.failed_at.clear()

    def info(self, key: str, now: float) -> dict:
        s = self._s.get(key) or _State()
        out = {"state": self.state(key, now), "opens": s.opens,
               "step_ms": round(s.step_s * 1e3, 2) if s.steps else None}
        if s.tripped:
            out["why"] = s.why
            if s.opened_until is not None and now < s.opened_until:
                out["back_in_s"] = round(s.opened_until - now, 1)
        return out

    def _slowness(self, key: str) -> str | None:
        c, me = self.config, self._s[key]
        if me.steps < c.slow_samples:
            return None
        others = [s.step_s for k, s in self._s.items()
                  if k != key and s.steps >= c.slow_samples and not s.tripped]
        if not others or me.step_s <= c.slow_factor * (best := min(others)):
            return None
        return (f"slow: {me.step_s * 1e3:.1f} ms per decode step against {best * 1e3:.1f} ms "
                f"on another pipeline (more than {c.slow_factor:g}x)")

    def _open(self, s: _State, now: float, why: str, slow: bool) -> None:
        c = self.config
        s.cooldown = c.cooldown_s if not s.tripped else min(2 * s.cooldown, c.max_cooldown_s)
        s.tripped, s.opened_until, s.why, s.slow = True, now + s.cooldown, why, slow
        s.opens += 1
        s.failed_at.clear()
        s.steps = 0     # judged again on fresh steps once it is probed

    def _get(self, key: str) -> _State:
        return self._s.setdefault(key, _State())
