"""Helpers for the sampler tests: many seeded draws from one row, and a chi-square check."""

import math

import numpy as np
import pytest

from kernels.sampling import sample
from wire.messages.sampling import SamplingParams


def draw_many(logits_row, params: SamplingParams, n: int) -> np.ndarray:
    """n tokens for steps 0..n-1 of one request, sampled as one batch of n identical rows."""
    assert not params.penalized, "history here is a stand-in: it only has to be long enough"
    logits = np.repeat(np.asarray(logits_row, dtype=np.float32)[None, :], n, axis=0)
    history = np.zeros(n, dtype=np.int64)
    return sample(logits, [params] * n, [history] * n, list(range(n))).tokens


def chi2_fits(counts: np.ndarray, probs: np.ndarray) -> bool:
    """True when counts are a plausible draw from probs (chi-square at alpha ~ 1e-3)."""
    support = probs > 0
    n = counts.sum()
    expected = n * probs[support]
    stat = float(((counts[support] - expected) ** 2 / expected).sum())
    df = int(support.sum()) - 1
    if df == 0:
        return True
    # Wilson-Hilferty approximation of the chi-square quantile, z = 3.09 for alpha = 1e-3.
    crit = df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3
    return stat < crit


@pytest.fixture
def draws():
    return draw_many


@pytest.fixture
def fits():
    return chi2_fits
