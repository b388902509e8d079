"""Top-k, top-p and min-p keep the right tokens, and sample them in the right proportions."""

import numpy as np
import pytest

from wire.messages.sampling import SamplingParams

N = 4000
# A small vocabulary with known probabilities; the -inf token must never come out.
PROBS = np.array([0.30, 0.25, 0.15, 0.12, 0.08, 0.06, 0.04, 0.0], dtype=np.float64)
with np.errstate(divide="ignore"):
    LOGITS = np.log(PROBS).astype(np.float32)  # log(0) = -inf on purpose
PERM = np.array([5, 2, 7, 0, 3, 6, 1, 4])  # token j has logit LOGITS[PERM[j]]: best is not id 0
INV = np.argsort(PERM)  # counts[INV] puts counts back in PROBS order


def expected(keep_mask):
    p = np.where(keep_mask, PROBS, 0.0)
    return p / p.sum()


@pytest.mark.parametrize("top_p, kept", [(0.5, 2), (0.54, 2), (0.56, 3), (0.9, 5), (1.0, 7)])
def test_top_p_keeps_smallest_set_reaching_p(draws, fits, top_p, kept):
    tokens = draws(LOGITS[PERM], SamplingParams(top_p=top_p, seed=11), N)
    counts = np.bincount(tokens, minlength=8)[INV]  # back to PROBS order
    want = expected(np.arange(8) < kept)
    assert (counts[want == 0] == 0).all()
    assert fits(counts, want)


def test_top_p_distribution_check_can_fail(draws, fits):
    # The same draws judged against the unfiltered distribution must be rejected.
    tokens = draws(LOGITS, SamplingParams(top_p=0.56, seed=11), N)
    assert not fits(np.bincount(tokens, minlength=8), expected(PROBS > 0))


@pytest.mark.parametrize("top_k", [1, 2, 4, 7, 50])
def test_top_k_keeps_k_best(draws, fits, top_k):
    tokens = draws(LOGITS[PERM], SamplingParams(top_k=top_k, seed=5), N)
    counts = np.bincount(tokens, minlength=8)[INV]
    want = expected(np.arange(8) < top_k)
    assert (counts[want == 0] == 0).all()
    assert fits(counts, want)


def test_top_p_renormalizes_over_top_k(draws, fits):
    # top_k=4 leaves mass 0.82; 0.6 of that is 0.492, reached by the best two (0.55).
    tokens = draws(LOGITS, SamplingParams(top_k=4, top_p=0.6, seed=3), N)
    want = expected(np.arange(8) < 2)
    counts = np.bincount(tokens, minlength=8)
    assert (counts[want == 0] == 0).all() and fits(counts, want)
    # With 0.7 of 0.82 = 0.574 the third token is needed.
    tokens = draws(LOGITS, SamplingParams(top_k=4, top_p=0.7, seed=3), N)
    assert set(np.unique(tokens)) == {0, 1, 2}


@pytest.mark.parametrize("min_p, kept", [(0.0, 7), (0.19, 6), (0.21, 5), (0.5, 3), (0.9, 1)])
def test_min_p_excludes_tokens_below_fraction_of_best(draws, fits, min_p, kept):
    # Ratios to the best: 0.83, 0.5, 0.4, 0.27, 0.2, 0.13.
    tokens = draws(LOGITS[PERM], SamplingParams(min_p=min_p, seed=9), N)
    counts = np.bincount(tokens, minlength=8)[INV]
    want = expected(np.arange(8) < kept)
    assert (counts[want == 0] == 0).all()
    assert fits(counts, want)


def test_temperature_reshapes_distribution(draws, fits):
    for t in (0.5, 2.0):
        tokens = draws(LOGITS, SamplingParams(temperature=t, seed=2), N)
        p = np.where(PROBS > 0, PROBS ** (1 / t), 0.0)
        assert fits(np.bincount(tokens, minlength=8), p / p.sum())


def test_top_k_ties_keep_lowest_ids(draws):
    logits = np.array([1.0, 3.0, 2.0, 2.0, 2.0, 0.0], dtype=np.float32)
    tokens = draws(logits, SamplingParams(top_k=3, seed=4), 2000)
    assert set(np.unique(tokens)) == {1, 2, 3}


def test_top_p_keeps_whole_tie_at_its_edge(draws):
    # Mass strictly above each of the tied tokens 1..3 is 0.4 < 0.5, so all three stay.
    logits = np.log(np.array([0.4, 0.2, 0.2, 0.2], dtype=np.float32))
    tokens = draws(logits, SamplingParams(top_p=0.5, seed=4), 2000)
    assert set(np.unique(tokens)) == {0, 1, 2, 3}


def test_wide_nucleus_past_candidate_window_is_exact(draws):
    # A nearly flat 2000-token vocabulary: top_p=0.9 needs ~1790 tokens, far more than the
    # first candidate window, so the exact full-sort path decides.
    V = 2000
    logits = (-1e-4 * np.arange(V)).astype(np.float32)
    p = np.exp(logits.astype(np.float64)); p /= p.sum()
    n_nucleus = int(np.searchsorted(np.cumsum(p), 0.9)) + 1
    tokens = draws(logits, SamplingParams(top_p=0.9, seed=8), 6000)
    assert n_nucleus - 5 < tokens.max() < n_nucleus  # nothing beyond the nucleus, its tail used
    first_half = (tokens < n_nucleus // 2).mean()
    want = p[: n_nucleus // 2].sum() / p[:n_nucleus].sum()
    assert abs(first_half - want) < 4 * np.sqrt(want * (1 - want) / tokens.size)
