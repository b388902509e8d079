"""What other architectures add to llama's layer, in C (kernels/arch_ops.py over ops.c), against the
numpy definitions NumpyLayers computes: bit for bit, on random and edge input."""

import numpy as np
import pytest

import kernels.arch_ops as ao
from kernels.ffn import gelu_tanh
from kernels.native_lib import load
from kernels.norm import rms_norm
from tests.conftest import require

F = np.float32


@pytest.fixture(params=["native", "numpy"])
def lib(request, monkeypatch):
    """Each op through the C library, and through its numpy fallback (the library not built)."""
    if request.param == "native":
        require(load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    else:
        monkeypatch.setattr(ao, "load", lambda: None)
    return request.param


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def scaled(rng, shape, spread=3.0):
    """Values over several orders of magnitude, so a different summation order would show."""
    return (rng.standard_normal(shape) * np.exp(rng.uniform(-spread, spread, shape))).astype(F)


def edge_gates(rng) -> np.ndarray:
    """Every float16 (the table's entries), the halfway points between neighbouring float16s (ties
    that round to even), the +-10 edges of the exact branches, signed zeros, infinities, NaNs,
    float16's subnormals and overflow, and random values."""
    f16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    f16 = f16[np.isfinite(f16)].astype(np.float64)
    ordered = np.unique(f16)
    ties = (ordered[:-1] + ordered[1:]) / 2                      # exact in float32 (float16 has 11 bits)
    near10 = np.array([10, -10], F)
    around = np.concatenate([np.nextafter(near10, F(0)), near10, np.nextafter(near10, F(100) * near10)])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.99, 65520, 2.0 ** -24,
                        2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -14, 1e-30, -1e-30], F)
    nan_payloads = np.array([0x7f800001, 0x7fa00000, 0xffc00001, 0x7fbfffff], np.uint32).view(F)
    return np.concatenate([f16.astype(F), ties.astype(F), around, special, nan_payloads,
                           scaled(rng, 50_000, 2.0)])


@pytest.mark.parametrize("t", [1, 3])
def test_geglu_is_bit_identical_to_gelu_tanh_times_up(lib, t):
    rng = np.random.default_rng(t)
    gate = edge_gates(rng)
    f = -(-gate.size // t)
    gate = np.resize(gate, t * f).reshape(t, f)
    gate_up = np.concatenate([gate, scaled(rng, (t, f))], axis=1)        # (T, 2F)
    with np.errstate(all="ignore"):
        want = gelu_tanh(np, gate_up[:, :f]) * gate_up[:, f:]
        got = ao.geglu(gate_up)
    assert got.dtype == F and got.shape == (t, f)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_geglu_writes_into_out_and_refuses_bad_arrays(lib):
    gate_up = np.random.default_rng(0).standard_normal((2, 8), dtype=F)
    out = np.empty((2, 4), F)
    assert ao.geglu(gate_up, out) is out
    for bad in (gate_up.astype(np.float64), gate_up[:, :7], gate_up[:, ::2]):
        with pytest.raises(ao.ArchOpError):
            ao.geglu(bad)
    with pytest.raises(ao.ArchOpError):
        ao.geglu(gate_up, np.empty((2, 5), F))


@pytest.mark.parametrize("t,h,kvh,dh", [(1, 4, 1, 256), (5, 16, 8, 128), (3, 9, 3, 64), (2, 3, 1, 20), (4, 2, 2, 130)])
def test_norms_of_q_and_k_heads_inside_qkv_rows_are_bit_identical(lib, t, h, kvh, dh):
    rng = np.random.default_rng(dh)
    qkv = scaled(rng, (t, (h + 2 * kvh) * dh))
    qw, kw = scaled(rng, dh, 1.0), scaled(rng, dh, 1.0)
    nq, nkv = h * dh, kvh * dh
    want = qkv.copy()
    want[:, :nq] = rms_norm(np, want[:, :nq].reshape(t, h, dh), qw, 1e-6).reshape(t, nq)
    want[:, nq:nq + nkv] = rms_norm(np, want[:, nq:nq + nkv].reshape(t, kvh, dh), kw, 1e-6).reshape(t, nkv)
    q, k = qkv[:, :nq].reshape(t, h, dh), qkv[:, nq:nq + nkv].reshape(t, kvh, dh)
    assert ao.rms_norm_heads(q, qw, 1e-6) is q
    ao.rms_norm_heads(k, kw, 1e-6)
    np.testing.assert_array_equal(bits(qkv), bits(want))                    # v untouched too


def test_head_norms_refuse_heads_that_are_not_side_by_side(lib):
    qkv = np.ones((2, 6 * 8), F)
    with pytest.raises(ao.ArchOpError):
        ao.rms_norm_heads(qkv[:, ::2].reshape(2, 3, 8), np.ones(8, F), 1e-6)     # strided inside a head
    with pytest.raises(ao.ArchOpError):
        ao.rms_norm_heads(qkv[:, :16].reshape(2, 2, 8), np.ones(4, F), 1e-6)     # weight of another size
    with pytest.raises(ao.ArchOpError):
        ao.rms_norm_heads(qkv.astype(np.float64)[:, :16].reshape(2, 2, 8), np.ones(8, F), 1e-6)


def test_bias_add_is_bit_identical(lib):
    rng = np.random.default_rng(3)
    x, b = scaled(rng, (5, 96)), scaled(rng, 96)
    want = x + b
    assert ao.add_bias(x, b) is x
    np.testing.assert_array_equal(bits(x), bits(want))
    with pytest.raises(ao.ArchOpError):
        ao.add_bias(x, b[:95])
    with pytest.raises(ao.ArchOpError):
        ao.add_bias(x[:, ::2], b[:48])
