"""Prefill pacing: how many prompt tokens a micro-batch may carry while streams are decoding.

A decode waits for every batch ahead of it in the pipeline, so a 512-token prefill chunk (seconds
on one CPU core) stalls every stream batched behind it. Each shard's recent compute time is fitted
as `fixed + per_token * tokens`; while any stream decodes, prefill gets what keeps the whole
pipeline's step near a target time, and never less than a floor, so waiting requests still
advance. Pure: numbers in, a token count out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    """Compute seconds of a batch of n tokens: fixed_s + per_token_s * n."""

    fixed_s: float
    per_token_s: float

    def seconds(self, tokens: int) -> float:
        return self.fixed_s + self.per_token_s * tokens


def fit(samples: list[tuple[int, float]]) -> Cost | None:
    """Least squares of (tokens, seconds) samples; a fit that says a bigger batch is cheaper, or
    that a batch costs less than nothing, falls back to the mean cost per token (which counts the
    fixed part in every token: it errs towards smaller chunks). None without samples."""
    if not samples:
        return None
    n = len(samples)
    mean_x = sum(x for x, _ in samples) / n
    mean_y = sum(y for _, y in samples) / n
    var = sum((x - mean_x) ** 2 for x, _ in samples)
    if var > 0:
        slope = sum((x - mean_x) * (y - mean_y) for x, y in samples) / var
        fixed = mean_y - slope * mean_x
        if slope > 0 and fixed >= 0:
            return Cost(fixed, slope)
    return Cost(0.0, mean_y / mean_x) if mean_x > 0 else None


class StepCost:
    """The pipeline's recent compute time per batch, fitted per shard over its last `window`
    batches; a batch's predicted time is the sum of its shards' (a decode waits for all of them)."""

    def __init__(self, window: int = 64):
        self.window = window
        self._samples: dict[str, deque[tuple[int, float]]] = {}
        self._fitted: Cost | None = None   # estimate() of the samples as they are; None: refit

    def record(self, seconds_by_shard: Mapping[str, float], tokens: int) -> None:
        """One batch of `tokens` took these compute seconds on each shard of its route. A shard
        absent from the route left the pipeline: its history no longer describes a step."""
        if tokens <= 0 or not seconds_by_shard:
            return
        self._fitted = None
        for gone in self._samples.keys() - seconds_by_shard.keys():
            del self._samples[gone]
        for shard, s in seconds_by_shard.items():
            if s >= 0:
                self._samples.setdefault(shard, deque(maxlen=self.window)).append((tokens, s))

    def estimate(self) -> Cost | None:
        """The whole pipeline's fit, or None before any batch was measured."""
        if self._fitted is None:
            fits = [fit(list(q)) for q in self._samples.values()]
            if fits and all(f is not None for f in fits):
                self._fitted = Cost(sum(f.fixed_s for f in fits), sum(f.per_token_s for f in fits))
        return self._fitted


def prefill_budget(cost: Cost | None, decodes: int, budget: int, step_s: float,
                   min_chunk: int, waited_s: float = 0.0, max_wait_s: float = float("inf"),
                   prefill_in_flight: int = 0) -> int:
    """Prefill tokens a batch may carry beside its `decodes` decode tokens, out of `budget`, while
    streams decode: as many as keep the predicted step within `step_s`, and at least `min_chunk`.

    The whole budget while nothing was measured yet, or once a request has waited `waited_s` past
    `max_wait_s` for its first token: a prompt needs many more tokens than a decode, so under load
    a paced queue would only grow, and streams keep their pace at the price of a user's whole wait.
    """
    if cost is None or cost.per_token_s <= 0 or waited_s > max_wait_s:
        return max(budget, 0)
    fits = int((step_s - cost.fixed_s) / cost.per_token_s) - decodes - prefill_in_flight
    return max(0, min(budget, max(fits, min_chunk)))
