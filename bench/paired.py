"""Paired A/B arithmetic for the serving benchmark: the order of each pair's two requests, and
the difference of inter-token latency p50 between the two sides with its spread.

Pure: takes token arrival times (seconds, one clock) per request and returns numbers; the
requests themselves are sent by bench.serve_ab.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.serve_workload import gaps


def abba(pairs: int) -> list[tuple[int, int]]:
    """Which side (0 or 1) goes first and second in each pair: 01, 10, 01, 10, ...; any drift
    of the machine during a run then falls on both sides alike."""
    return [(0, 1) if k % 2 == 0 else (1, 0) for k in range(pairs)]


@dataclass(frozen=True)
class PairedDiff:
    """Side 1 minus side 0, in seconds: ITL p50 over all gaps of each side, its 95% bootstrap
    interval (pairs resampled), the same difference on each half of the pairs, and the median
    of per-pair differences of each request's own ITL median."""
    pairs: int
    p50_a: float
    p50_b: float
    diff: float
    low: float
    high: float
    first_half: float
    second_half: float
    per_pair_median: float


def verdict(d: PairedDiff, target_s: float) -> str:
    """MET when the whole interval is under the target, NOT MET when it is all at or above it,
    UNSETTLED when the machine's noise leaves both possible (run more pairs, or when quieter)."""
    if d.high < target_s:
        return "MET"
    return "NOT MET" if d.low >= target_s else "UNSETTLED"


def _p50(per_request: list[np.ndarray], idx) -> float:
    pooled = np.concatenate([per_request[i] for i in idx]) if len(idx) else np.zeros(0)
    return float(np.median(pooled)) if pooled.size else float("nan")


def itl_diff(a: list[list[float]], b: list[list[float]], rounds: int = 2000,
             seed: int = 0) -> PairedDiff:
    """`a[k]` and `b[k]` are the token arrival times of pair k's request on each side (a pair
    counts only when both sides have at least two tokens)."""
    keep = [k for k in range(min(len(a), len(b))) if len(a[k]) > 1 and len(b[k]) > 1]
    if not keep:
        raise ValueError("no pair has two tokens on both sides")
    ga = [np.asarray(gaps(a[k]), dtype=np.float64) for k in keep]
    gb = [np.asarray(gaps(b[k]), dtype=np.float64) for k in keep]
    n = len(keep)
    every = np.arange(n)
    rng = np.random.default_rng(seed)
    boot = np.empty(rounds, dtype=np.float64)
    for r in range(rounds):
        idx = rng.integers(0, n, size=n)
        boot[r] = _p50(gb, idx) - _p50(ga, idx)
    half = n // 2
    per_pair = [float(np.median(gb[i]) - np.median(ga[i])) for i in range(n)]
    p50_a, p50_b = _p50(ga, every), _p50(gb, every)
    return PairedDiff(
        pairs=n, p50_a=p50_a, p50_b=p50_b, diff=p50_b - p50_a,
        low=float(np.percentile(boot, 2.5)), high=float(np.percentile(boot, 97.5)),
        first_half=_p50(gb, every[:half]) - _p50(ga, every[:half]),
        second_half=_p50(gb, every[half:]) - _p50(ga, every[half:]),
        per_pair_median=float(np.median(per_pair)))


@dataclass(frozen=True)
class Latency:
    """Side 1 minus side 0, medians over the pairs that produced the same number of tokens on
    both sides (the same greedy computation): time to first token, and the whole request's
    time (send to last token) divided by its tokens; seconds."""
    pairs: int
    first_token: float
    per_token: float


def added_latency(a: list[tuple[float, list[float]]],
                  b: list[tuple[float, list[float]]]) -> Latency | None:
    """`a[k]` is (sent, arrival times) of pair k on side 0; None when no pair counts."""
    same = [(sa, xa, sb, xb) for (sa, xa), (sb, xb) in zip(a, b) if xa and len(xa) == len(xb)]
    if not same:
        return None
    first = np.array([(xb[0] - sb) - (xa[0] - sa) for sa, xa, sb, xb in same], dtype=np.float64)
    whole = np.array([((xb[-1] - sb) - (xa[-1] - sa)) / len(xa) for sa, xa, sb, xb in same],
                     dtype=np.float64)
    return Latency(len(same), float(np.median(first)), float(np.median(whole)))


def delivery_delays(a: list[float], b: list[float], max_shift: int = 3) -> np.ndarray:
    """How much later side 1 received each token than side 0 received the token of the same
    step, for two requests that decode in the same batches: each step's tokens for both leave
    the scheduler together, so the difference is what lies between the scheduler and each
    client. One side may have joined the batches a step or two after the other: the index
    shift that best lines up the two streams is used, and tokens with no partner are left out."""
    ta = np.asarray(a, dtype=np.float64)
    tb = np.asarray(b, dtype=np.float64)
    best = np.zeros(0, dtype=np.float64)
    best_score = np.inf
    for shift in range(-max_shift, max_shift + 1):
        lo, hi = max(0, -shift), min(tb.size, ta.size - shift)   # b[i] pairs with a[i + shift]
        if hi - lo <= 0:
            continue
        d = tb[lo:hi] - ta[lo + shift:hi + shift]
        score = float(np.median(np.abs(d)))
        if score < best_score:
            best, best_score = d, score
    return best
