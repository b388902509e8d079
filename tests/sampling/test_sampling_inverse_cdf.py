"""The two-level inverse-CDF walk picks the token whose cumulative-weight interval holds u."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.sampling import _inverse_cdf

U_MAX = np.float32(1 - 2.0 ** -24)  # the largest draw uniform() can return


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 1500), st.floats(0.0, 0.999))
def test_pick_lies_in_interval_holding_u(seed, V, zero_frac):
    rng = np.random.default_rng(seed)
    w = rng.exponential(size=(4, V)).astype(np.float32)
    w[rng.random((4, V)) < zero_frac] = 0
    w[:, rng.integers(0, V)] = 1  # at least one weighted token per row
    u = np.array([0, rng.random(), rng.random(), U_MAX], dtype=np.float32)
    picks = _inverse_cdf(w, u, np)
    c = np.cumsum(w.astype(np.float64), axis=1)
    for r, i in enumerate(picks):
        assert w[r, i] > 0
        target = float(u[r]) * c[r, -1]
        lo = c[r, i - 1] if i else 0.0
        tol = 1e-5 * c[r, -1]
        assert lo - tol <= target <= c[r, i] + tol


def test_ends_of_the_range_pick_first_and_last_weighted():
    w = np.zeros((1, 1000), dtype=np.float32)
    w[0, [3, 600, 777]] = [1.0, 2.0, 1e-30]
    assert _inverse_cdf(w, np.array([0.0], np.float32), np)[0] == 3
    # The last token's share is below float32 resolution, yet u = U_MAX never lands past it.
    assert _inverse_cdf(w, np.array([U_MAX]), np)[0] in (600, 777)
    assert _inverse_cdf(w, np.array([0.5], np.float32), np)[0] == 600
