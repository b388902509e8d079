"""The K-quant (Q4_K, Q5_K, Q6_K) and 5-bit (Q5_0, Q5_1) kinds: the native product equals the gguf
package's dequantization of the blocks times x rounded as derived here from llama.cpp's
quantize_row_q8_K (K kinds) or Q8_0/Q8_1 (5-bit kinds), on every code path; integer sums exact;
the K kinds give the same bits on every path; a row's result does not depend on its batch."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

from kernels import qmatmul as qm
from kernels.qact import round_act
from kernels.qmatrix import QUANT_KINDS, BadQuantShape, QMatrix, QRows
from tests.conftest import require

from .invariance import assert_batch_invariant

K_KINDS = ("q4_k", "q5_k", "q6_k")
Q5_KINDS = ("q5_0", "q5_1")
SHAPES = ((37, 256), (19, 1024))                 # (N, K): N off every tile size
TS = (1, 2, 3, 4, 5, 9)


def q8k(x: np.ndarray) -> np.ndarray:
    """x rounded as quantize_row_q8_K (ggml-quants.c), derived here block by block in float32:
    max = the signed element of largest |x| (the first), iscale = -127 / max,
    q = min(127, round-half-even(iscale * x)), d = 1 / iscale; returns d * q in float64."""
    out = np.zeros(x.shape, np.float64)
    for t in range(x.shape[0]):
        for b in range(0, x.shape[1], 256):
            blk = x[t, b:b + 256]
            mx = blk[int(np.argmax(np.abs(blk)))]
            with np.errstate(divide="ignore", over="ignore"):
                iscale = np.float32(-127) / mx
            if not np.isfinite(iscale):              # max 0, or below 127 / FLT_MAX: all quants 0
                continue
            q = np.minimum(np.rint(iscale * blk), 127)
            out[t, b:b + 256] = q.astype(np.float64) * np.float64(np.float32(1) / iscale)
    return out


def k_blocks(rng, kind: str, rows: int, cols: int, d=None, dmin=None) -> QMatrix:
    """Valid K blocks from random bytes (every byte pattern of quants and packed scales is a
    valid block) with the float16 super-block scales real weights have (d ~ 1e-3)."""
    per, bb = QUANT_KINDS[kind]
    nb = rows * cols // per
    data = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    dd = (rng.normal(0, 1e-3, nb) if d is None else np.full(nb, d)).astype(np.float16)
    dm = (np.abs(rng.normal(0, 1e-3, nb)) if dmin is None else np.full(nb, dmin)).astype(np.float16)
    if kind == "q6_k":
        data[:, 208:210] = dd.view(np.uint8).reshape(nb, 2)
    else:
        data[:, 0:2] = dd.view(np.uint8).reshape(nb, 2)
        data[:, 2:4] = dm.view(np.uint8).reshape(nb, 2)
    return QMatrix(kind, data.reshape(rows, cols // per * bb), cols)


def weights(rng, kind: str, rows: int, cols: int) -> QMatrix:
    if kind in K_KINDS:          # gguf's numpy quantizer lacks the K kinds
        return k_blocks(rng, kind, rows, cols)
    w = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(0.02)
    return QMatrix(kind, quantize(w, QT[kind.upper()]), cols)


def reference(x: np.ndarray, w: QMatrix) -> tuple[np.ndarray, np.ndarray]:
    """(x rounded . gguf-dequantized w, |x rounded| . |w|) in float64."""
    wd = dequantize(w.data, QT[w.kind.upper()]).reshape(w.shape).astype(np.float64)
    xr = q8k(x) if w.kind in K_KINDS else round_act(x).astype(np.float64)
    return xr @ wd.T, np.abs(xr) @ np.abs(wd).T + 1e-30


def assert_generic_bits(isa: str, x: np.ndarray, w: QMatrix, rows) -> None:
    """The first t rows of x against w give on `isa` the generic path's bits, for each t in rows."""
    for t in rows:
        got = qm.qmatmul(x[:t], w)
        qm.set_isa("generic")
        want = qm.qmatmul(x[:t], w)
        qm.set_isa(isa)
        np.testing.assert_array_equal(got, want, err_msg=f"{t} rows")


@pytest.mark.parametrize("kind", K_KINDS + Q5_KINDS)
def test_product_is_gguf_dequantization_times_rounded_x(isa, kind):
    rng = np.random.default_rng(sum(map(ord, isa + kind)))
    for n, k in SHAPES:
        w = weights(rng, kind, n, k)
        for t in TS:
            x = rng.standard_normal((t, k)).astype(np.float32)
            ref, scale = reference(x, w)
            got = qm.qmatmul(x, w)
            assert got.dtype == np.float32 and got.shape == ref.shape
            err = (np.abs(got - ref) / scale).max()
            assert err < 1e-5, f"{kind} ({n}, {k}) T={t}: worst relative error {err:.2e}"


@pytest.mark.parametrize("kind", K_KINDS)
def test_integer_sums_are_exact(isa, kind):
    """d = dmin = 1 and x integers with -127 leading each block (so iscale = 1, q = x, d_x = 1): every
    output is an integer below 2^24, which float32 holds exactly."""
    rng = np.random.default_rng(3)
    w = k_blocks(rng, kind, 11, 512, d=1.0, dmin=1.0)
    x = rng.integers(-126, 127, size=(5, 512)).astype(np.float32)
    x[:, ::256] = -127
    want = x.astype(np.float64) @ dequantize(w.data, QT[kind.upper()]).reshape(w.shape).astype(np.float64).T
    assert np.abs(want).max() < 2**24
    np.testing.assert_array_equal(qm.qmatmul(x, w), want)


@pytest.mark.parametrize("kind", K_KINDS)
def test_k_kinds_give_the_generic_bits_on_every_path(isa, kind):
    """qk_avx2.c and qk_avx512.c sum a K block's integers before any float, in qk_generic.c's float
    order. Rows of x: 1, 3 and 4 (tiles of 8 weight rows, then the 5 left one by one), 8, 19 (the
    batch tiles' 16, then 2 and 1) and 43 (16, 16, 8, then 3: past 16 the batch tiles take the
    weight rows 32 at a time, so 45 of them end in a part block and tiles of fewer weight rows)."""
    rng = np.random.default_rng(4)
    w = weights(rng, kind, 45, 768)
    x = rng.standard_normal((43, 768)).astype(np.float32)
    assert_generic_bits(isa, x, w, (1, 3, 4, 8, 19, 43))


@pytest.mark.parametrize("kind", K_KINDS)
def test_the_batch_tiles_largest_sums_give_the_generic_bits(isa, kind):
    """The batch tiles add several quads' products in 16-bit lanes before a scale is applied (Q4_K
    4 pairs, Q5_K 2, Q6_K 1: qk.h): at the extremes they must still be exact. Every quant and scale
    byte 0xff (unsigned quants 15, 31, 63; 6-bit scales and mins 63) against x rounded to -127
    everywhere (a constant row) or +127 but for each block's first element (-c, then +c)."""
    rng = np.random.default_rng(8)
    w = k_blocks(rng, kind, 12, 512)
    per, bb = QUANT_KINDS[kind]
    data = w.data.reshape(-1, bb).copy()
    keep = slice(208, 210) if kind == "q6_k" else slice(0, 4)       # the float16 d (and dmin)
    saved = data[:, keep].copy()
    data[:] = 0xFF
    data[:, keep] = saved
    w = QMatrix(kind, data.reshape(w.data.shape), w.shape[1])
    x = np.full((16, 512), 0.5, dtype=np.float32)
    x[8:] *= -1
    x[8:, ::256] = 0.5                                                 # -127 first, then +127
    q = np.minimum(np.rint(np.float32(-127) / x[:, :1] * x), 127)   # every block's max is its first
    assert (q[:8] == -127).all() and (q[8:, ::256] == -127).all() and (q[8:, 1:256] == 127).all()
    assert_generic_bits(isa, x, w, (8, 16))


@pytest.mark.parametrize("kind", Q5_KINDS)
def test_q5_kinds_give_the_generic_bits_on_every_path(isa, kind):
    """qk_avx2.c's Q5 tiles (the AVX-512 path runs them too) sum a block's integers (Q5_0's -16 among
    them) before any float, in qk_generic.c's float order: 1 row (decode tiles of 8 weight rows, then
    5 alone) and 19 (8, 8, 3)."""
    rng = np.random.default_rng(6)
    w = weights(rng, kind, 21, 768)
    x = rng.standard_normal((19, 768)).astype(np.float32)
    assert_generic_bits(isa, x, w, (1, 19))


@pytest.mark.parametrize("kind", K_KINDS + Q5_KINDS)
def test_a_row_gives_the_same_bits_alone_and_in_any_batch(isa, kind):
    rng = np.random.default_rng(5)
    w = weights(rng, kind, 13, 512)
    x = rng.standard_normal((23, 512)).astype(np.float32)
    assert_batch_invariant(x, w, (0, 3, 4, 13, 22))


def test_q8k_rounding_by_hand():
    """The first element of largest |x| sets the sign of iscale; ties round to even; d = 1 / iscale."""
    x = np.zeros((2, 256), np.float32)
    x[0, :5] = [-2.0, 2.0, 1.0, 0.5, -0.25]                   # max -2: iscale 63.5
    x[1, :3] = [2.0, -2.0, 1.0]                               # max +2 (the first): iscale -63.5
    q, d = qm.rounded_k(x)
    np.testing.assert_array_equal(q[0, :5], [-127, 127, 64, 32, -16])    # 63.5 -> 64, 31.75 -> 32, -15.875 -> -16
    np.testing.assert_array_equal(q[1, :3], [-127, 127, -64])
    np.testing.assert_array_equal(d[:, 0], [np.float32(1) / np.float32(63.5), np.float32(1) / np.float32(-63.5)])
    assert not q[:, 5:].any() and q.dtype == np.int8 and d.dtype == np.float32


def test_native_q8k_rounding_is_the_numpy_definition_bit_for_bit():
    require(qm.available(), "the native library is not built")
    from kernels.qact import round_act_k
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 1024)).astype(np.float32) * np.float32(3)
    x[1] *= np.float32(1e-30)
    x[2] = np.round(x[2] * 10) / 10                            # many ties after scaling
    x[3, :256] = 0.0                                           # an all-zero block
    x[4] *= np.float32(1e30)
    x[5, 300] = np.nan
    q, d = qm.rounded_k(x)
    q2, d2 = round_act_k(x)
    np.testing.assert_array_equal(q, q2)
    np.testing.assert_array_equal(d, d2)
    assert d[3, 0] == 0 and np.isnan(d[5, 1]) and np.isfinite(d[5, [0, 2, 3]]).all()
    dx = np.repeat(d2, 256, axis=1)                            # the test's own derivation agrees too
    np.testing.assert_array_equal(q2 * dx.astype(np.float64), np.where(np.isnan(dx), np.nan, q8k(x)))


def adversarial_q8k_rows(rng) -> np.ndarray:
    """Blocks of 256 that probe every branch of the Q8_K rounding: ties after scaling, zeros, NaN and
    inf, the largest |x| at a negative element, equal magnitudes of both signs (the first wins), a max
    so small that -127 / max overflows, subnormals, float32's largest, the max in the last lane."""
    f32 = np.finfo(np.float32)
    blocks = []
    tie = rng.integers(-126, 126, 256).astype(np.float32) + np.float32(0.5)   # iscale 1: every element a tie
    tie[7] = -127
    blocks.append(tie)
    half = tie.copy() / np.float32(2)                                          # iscale 2: ties again, smaller
    blocks.append(half)
    blocks.append(np.zeros(256, np.float32))
    for bad in (np.nan, np.inf, -np.inf):
        b = rng.standard_normal(256).astype(np.float32)
        b[rng.integers(256)] = bad
        blocks.append(b)
    neg = rng.standard_normal(256).astype(np.float32)
    neg[100] = -9.0
    blocks.append(neg)
    for first in (-4.0, 4.0):                                                   # |max| twice, signs opposite
        b = rng.standard_normal(256).astype(np.float32)
        b[30], b[31], b[200] = first, -first, -first       # 31: in 30's lane group of 8 too
        blocks.append(b)
    blocks.append(rng.standard_normal(256).astype(np.float32) * np.float32(1e-38))   # iscale overflows
    blocks.append(rng.standard_normal(256).astype(np.float32) * np.float32(1e-36))   # just above it
    blocks.append((rng.integers(-3, 4, 256) * f32.smallest_subnormal).astype(np.float32))
    big = rng.standard_normal(256).astype(np.float32) * np.float32(1e37)
    big[5] = f32.max
    blocks.append(big)
    last = rng.standard_normal(256).astype(np.float32)
    last[255] = 50.0
    blocks.append(last)
    blocks.append(np.full(256, -3.0, np.float32))
    x = np.concatenate(blocks)
    x = np.concatenate([x, np.zeros(-len(x) % 1024, np.float32)])
    return np.concatenate([x.reshape(-1, 1024), rng.standard_normal((20, 1024)).astype(np.float32) * np.float32(5)])


def test_q8k_rounding_gives_the_same_bits_on_every_path():
    """Each path's rounding (qk.c's scalar definition, qk_avx2.c's vector one) on random and
    adversarial blocks: the same q and d as the numpy definition, and the same products (which
    read each path's sums of 16 quants) from the K kinds."""
    require(qm.available(), "the native library is not built")
    from kernels.qact import round_act_k
    rng = np.random.default_rng(10)
    x = adversarial_q8k_rows(rng)
    want_q, want_d = round_act_k(x)
    ws = [weights(rng, kind, 9, 1024) for kind in K_KINDS]
    got = {}
    try:
        for name in ("generic", "avx2", "avx512"):
            if qm.set_isa(name) == name:
                got[name] = (*qm.rounded_k(x), *(qm.qmatmul(x, w) for w in ws))
    finally:
        qm.set_isa("auto")
    for name, (q, d, *outs) in got.items():
        np.testing.assert_array_equal(q, want_q, err_msg=name)
        np.testing.assert_array_equal(d, want_d, err_msg=name)
        for kind, out, ref in zip(K_KINDS, outs, got["generic"][2:]):
            np.testing.assert_array_equal(out, ref, err_msg=f"{name} {kind}")
    q, d = want_q.reshape(-1, 256), want_d.reshape(-1)
    assert (q[0] == np.rint(x.reshape(-1, 256)[0])).all() and (q[0] % 2 == 0).sum() > 200   # max -127: ties to even
    assert d[2] == 0 and np.isnan(d[3:6]).all() and d[11] == 0 and d[12] != 0 and not q[[2, 3, 11]].any()
    assert q[6, 100] == q[7, 30] == q[8, 30] == -127 and q[7, 200] == q[8, 200] == 127   # the max: -127
    assert d[6] > 0 and d[7] > 0 and d[8] < 0                                   # its sign in d


@pytest.mark.parametrize("kind", K_KINDS + Q5_KINDS)
def test_nan_in_x_reaches_only_its_rows(isa, kind):
    rng = np.random.default_rng(7)
    w = weights(rng, kind, 8, 512)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    x[1, 300] = np.nan
    out = qm.qmatmul(x, w)
    assert np.isfinite(out[[0, 2]]).all() and np.isnan(out[1]).all()


@pytest.mark.parametrize("kind", K_KINDS + Q5_KINDS)
def test_numpy_fallback_matches(monkeypatch, kind):
    rng = np.random.default_rng(8)
    w = weights(rng, kind, 17, 512)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    native = qm.qmatmul(x, w)
    monkeypatch.setattr(qm, "_load", lambda: None)
    fallback = qm.qmatmul(x, w)
    ref, scale = reference(x, w)
    assert (np.abs(fallback - ref) / scale).max() < 1e-5
    np.testing.assert_allclose(native, fallback, rtol=1e-4, atol=1e-4 * np.abs(fallback).max())


def test_k_rows_must_be_whole_super_blocks():
    with pytest.raises(BadQuantShape, match="multiple of 256"):
        QMatrix("q4_k", np.zeros((2, 144), np.uint8), 128)
    with pytest.raises(BadQuantShape, match="bytes"):
        QMatrix("q6_k", np.zeros((2, 144), np.uint8), 256)
    w = QMatrix("q5_1", np.zeros((2, 24), np.uint8), 32)
    with pytest.raises(ValueError, match="shape"):
        qm.qmatmul(np.zeros((1, 64), np.float32), w)


def test_rows_of_mixed_kinds_multiply_part_by_part(isa):
    """A QRows (Q4_K_M's q|k in Q4_K beside v in Q6_K, or Q5_0 beside Q8_0) gives each part's product
    in its columns (kernels.program's matmul of one: test_program.py)."""
    rng = np.random.default_rng(9)
    parts = (weights(rng, "q4_k", 24, 512), weights(rng, "q6_k", 8, 512), weights(rng, "q5_0", 5, 512))
    w = QRows(parts)
    assert w.shape == (37, 512) and w.nbytes == sum(p.nbytes for p in parts)
    np.testing.assert_array_equal(w.dequantize(), np.concatenate([p.dequantize() for p in parts]))
    x = rng.standard_normal((3, 512)).astype(np.float32)
    want = np.concatenate([qm.qmatmul(x, p) for p in parts], axis=1)
    np.testing.assert_array_equal(qm.qmatmul(x, w), want)
    with pytest.raises(BadQuantShape, match="width"):
        QRows((parts[0], weights(rng, "q4_k", 4, 256)))
