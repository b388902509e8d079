"""The fused CPU ops (kernels/native/ops.c) against the numpy kernels they replace: bit for bit."""

import numpy as np
import pytest

import kernels.norm as norm
import kernels.rope as rope
from kernels.attention import write_kv
from kernels.native_lib import load
from tests.conftest import require

F = np.float32


@pytest.fixture
def native_lib():
    require(load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")


native = pytest.mark.usefixtures("native_lib")


def scaled(rng, shape, spread=3.0):
    """Values over several orders of magnitude, so a different summation order would show."""
    return (rng.standard_normal(shape) * np.exp(rng.uniform(-spread, spread, shape))).astype(F)


@native
@pytest.mark.parametrize("t,d", [(1, 576), (5, 576), (3, 7), (2, 128), (4, 129), (1, 1000), (16, 64), (2, 4096)])
def test_add_rms_norm_is_bit_identical_to_numpy(t, d, isa):
    """On every code path (each has its own copy: kernels/native/norm_path.h)."""
    rng = np.random.default_rng(d + t)
    h, delta, w = scaled(rng, (t, d)), scaled(rng, (t, d)), scaled(rng, (d,), 1.0)
    want_h = h + delta
    want = norm.rms_norm(np, want_h, w, 1e-5)
    got = norm.add_rms_norm(h, delta, w, 1e-5)
    assert got.dtype == F
    np.testing.assert_array_equal(h, want_h)                  # the residual add happened in place
    np.testing.assert_array_equal(got, want)
    out = np.empty_like(h)
    assert norm.add_rms_norm(h, None, w, 1e-5, out=out) is out  # no delta: h is left alone
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(h, want_h)


@native                                                       # else both sides are the fallback
def test_add_rms_norm_fallback_matches(monkeypatch):
    rng = np.random.default_rng(0)
    h, delta, w = scaled(rng, (3, 576)), scaled(rng, (3, 576)), scaled(rng, (576,), 1.0)
    a = norm.add_rms_norm(h.copy(), delta, w, 1e-6)
    monkeypatch.setattr(norm, "load", lambda: None)
    np.testing.assert_array_equal(norm.add_rms_norm(h.copy(), delta, w, 1e-6), a)


@pytest.mark.parametrize("bad", ["weight", "delta", "dtype", "strided", "out", "ndim"])
def test_add_rms_norm_refuses_bad_shapes(bad):
    h, delta, w, out = np.ones((2, 8), F), np.ones((2, 8), F), np.ones(8, F), None
    if bad == "weight":
        w = np.ones(7, F)
    elif bad == "delta":
        delta = np.ones((1, 8), F)
    elif bad == "dtype":
        h = h.astype(np.float64)
    elif bad == "strided":
        h = np.ones((2, 16), F)[:, ::2]
    elif bad == "out":
        out = np.empty((2, 9), F)
    elif bad == "ndim":
        h = np.ones(8, F)
    with pytest.raises(norm.NormShapeError):
        norm.add_rms_norm(h, delta, w, 1e-5, out=out)


def rope_case(seed, t=3, h=9, kvh=3, dh=64, n_rot=64, num_pages=8, page=4):
    rng = np.random.default_rng(seed)
    qkv = rng.standard_normal((t, (h + 2 * kvh) * dh), dtype=F)
    pos = rng.permutation(num_pages * page)[:t]
    cos, sin = rope.rope_tables(np, pos, n_rot, 10000.0, F)
    kc, vc = rng.standard_normal((2, num_pages, page, kvh, dh), dtype=F).astype(np.float16)   # a shard's cache
    return qkv, cos, sin, kc, vc, pos // page, pos % page


def numpy_rope_write_kv(qkv, h, kvh, cos, sin, kc, vc, pages, slots):
    t, dh = qkv.shape[0], kc.shape[3]
    q = rope.apply_rope(np, qkv[:, :h * dh].reshape(t, h, dh), cos, sin)
    k = rope.apply_rope(np, qkv[:, h * dh:(h + kvh) * dh].reshape(t, kvh, dh), cos, sin)
    write_kv(kc, vc, k, qkv[:, (h + kvh) * dh:].reshape(t, kvh, dh), pages, slots)
    return q


@pytest.mark.parametrize("seed,shape", [(0, {}), (1, dict(t=1)), (2, dict(t=16, h=4, kvh=4, dh=32, n_rot=16)),
                                        (3, dict(t=5, h=6, kvh=2, dh=10, n_rot=0))])
@pytest.mark.parametrize("lib", ["native", "numpy"])
def test_rope_write_kv_is_bit_identical_to_apply_rope_and_write_kv(seed, shape, lib, monkeypatch):
    if lib == "numpy":
        monkeypatch.setattr(rope, "load", lambda: None)
    else:
        require(load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    qkv, cos, sin, kc, vc, pages, slots = rope_case(seed, **shape)
    h, kvh = shape.get("h", 9), shape.get("kvh", 3)
    want_k, want_v = kc.copy(), vc.copy()
    want_q = numpy_rope_write_kv(qkv, h, kvh, cos, sin, want_k, want_v, pages, slots)
    q = rope.rope_write_kv(qkv, h, kvh, cos, sin, kc, vc, pages, slots)
    assert q.dtype == F and q.shape == want_q.shape
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(kc.view(np.uint16), want_k.view(np.uint16))   # written slots, nothing else
    np.testing.assert_array_equal(vc.view(np.uint16), want_v.view(np.uint16))


def test_rope_write_kv_rounds_to_float16_as_numpy_casts():
    """The C write rounds each k and v to float16 as numpy's cast does (to nearest, ties to even,
    overflow to infinity, subnormals, a NaN's payload): v as it is, over float32s of every exponent
    (random bits) and the edges of float16's range, each ulp's tie among them."""
    require(load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    edges = np.array([65504, 65519.996, 65520, 65536, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25,
                      2.0 ** -26, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 2.0 ** -14 - 2.0 ** -25, np.inf, np.nan],
                     np.float32)
    ties = (np.arange(-(1 << 15), 1 << 15, dtype=np.int64).astype(np.uint16).view(np.float16).astype(np.float32)
            .view(np.uint32) + np.uint32(1 << 12)).view(np.float32)          # halfway above each float16
    wild = np.random.default_rng(3).integers(0, 1 << 32, 1 << 17, dtype=np.uint64).astype(np.uint32).view(np.float32)
    v = np.concatenate([edges, -edges, ties, wild])
    dh = 64
    v = np.concatenate([v, np.zeros(-v.size % dh, np.float32)]).reshape(-1, dh)
    t = v.shape[0]
    qkv = np.concatenate([np.zeros((t, 2 * dh), np.float32), v], axis=1)    # one head of q, k, v
    cos, sin = np.ones((t, dh // 2), np.float32), np.zeros((t, dh // 2), np.float32)
    kc, vc = np.zeros((2, t, 1, 1, dh), np.float16)
    with np.errstate(invalid="ignore", over="ignore"):
        rope.rope_write_kv(qkv, 1, 1, cos, sin, kc, vc, np.arange(t), np.zeros(t, np.int64))
        want = v.astype(np.float16)
    np.testing.assert_array_equal(vc.reshape(t, dh).view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("bad", ["heads", "cos", "page", "slot", "dtype", "cache_dtype", "cache_shape", "q_out"])
def test_rope_write_kv_refuses_bad_input(bad):
    qkv, cos, sin, kc, vc, pages, slots = rope_case(7)
    h, q_out = 9, None
    if bad == "heads":
        h = 8
    elif bad == "cos":
        cos = cos[:, :-1]
    elif bad == "page":
        pages = pages.copy(); pages[1] = kc.shape[0]
    elif bad == "slot":
        slots = slots.copy(); slots[0] = -1
    elif bad == "dtype":
        qkv = qkv.astype(np.float16)
    elif bad == "cache_dtype":
        kc, vc = kc.astype(F), vc.astype(F)
    elif bad == "cache_shape":
        vc = vc[:-1]
    elif bad == "q_out":
        q_out = np.empty((3, 9, 63), F)
    before = kc.copy()
    with pytest.raises(rope.RopeShapeError):
        rope.rope_write_kv(qkv, h, 3, cos, sin, kc, vc, pages, slots, q_out=q_out)
    np.testing.assert_array_equal(kc, before)                 # refused before writing anything
