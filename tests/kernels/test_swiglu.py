"""The library's SwiGLU gate (kernels/native/swiglu.c): silu(g) * up within 3 ulp of the exact value
(exp's 1 and three roundings), numpy's definition at the infinities, NaN and zeros, and the same bits
on every code path and for a row alone or in a batch."""

import numpy as np

from kernels import qmatmul as qm
from kernels.ffn import native_swiglu
from tests.conftest import require

F = np.float32


def gate(g: np.ndarray, up: np.ndarray | None = None) -> np.ndarray:
    g = np.asarray(g, F).reshape(1, -1)
    up = np.ones_like(g) if up is None else np.asarray(up, F).reshape(1, -1)
    return native_swiglu(np.concatenate([g, up], axis=1))[0]


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 steps (got and want finite, of one sign or zero)."""
    return np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))


def test_silu_is_within_3_ulp_of_the_exact_value(isa):
    rng = np.random.default_rng(0)
    mags = np.exp(rng.uniform(np.log(1e-6), np.log(120), 200_000))
    g = (mags * rng.choice([-1, 1], mags.size)).astype(F)
    g = np.concatenate([g, np.linspace(-30, 30, 6007, dtype=F)])
    with np.errstate(over="ignore"):
        exact = g.astype(np.float64) / (1 + np.exp(-g.astype(np.float64)))     # the test's own definition
    want = exact.astype(F)
    got = gate(g)
    # below 1e-30 (g < -72) exp's range ends (e^g is 0 past -87.3): such a gate is 0 to the model
    big = np.abs(want) >= 1e-30
    assert ulps(got[big], want[big]).max() <= 3
    assert np.all(np.abs(got[~big]) <= 1e-30)


def test_silu_keeps_numpy_s_definition_at_the_edges(isa):
    g = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30, 88.8, -88.8, -104.0], F)
    with np.errstate(over="ignore", invalid="ignore"):
        want = g / (F(1) + np.exp(-g))                                      # numpy's g / (1 + exp(-g))
    got = gate(g)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite], want[finite])
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))   # -0.0 stays -0.0


def test_up_multiplies_the_gate_and_rows_do_not_depend_on_their_batch(isa):
    rng = np.random.default_rng(1)
    for f in (1, 7, 8, 13, 1536):                                          # vector lanes and the tail
        gu = (rng.standard_normal((5, 2 * f)) * 4).astype(F)
        whole = native_swiglu(gu)
        for t in range(5):
            np.testing.assert_array_equal(native_swiglu(gu[t:t + 1])[0], whole[t])
            np.testing.assert_array_equal(whole[t], gate(gu[t, :f]) * gu[t, f:])


def test_every_path_gives_the_same_bits():
    require(qm.available(), "the native library is not built")
    rng = np.random.default_rng(2)
    gu = (rng.standard_normal((3, 2 * 1001)) * 10).astype(F)
    got = {}
    for name in ("generic", "avx2", "avx512"):
        if qm.set_isa(name) == name:
            got[name] = native_swiglu(gu)
    qm.set_isa("auto")
    for name, out in got.items():
        np.testing.assert_array_equal(out, got["generic"], err_msg=name)
