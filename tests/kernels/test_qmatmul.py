"""The quantized matmul equals round_act(x) @ dequantize(w).T on every code path (x rounded to 8 bits
per block as llama.cpp rounds it), a row's result does not depend on its batch, and the
dequantization is ggml's."""

import shutil

import numpy as np
import pytest

from kernels import qmatmul as qm
from kernels.qact import round_act
from kernels.qmatrix import QUANT_KINDS, BadQuantShape, QMatrix, from_gguf
from tests.conftest import require

from .invariance import assert_batch_invariant

TS = (1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 64)
SHAPES = ((37, 32), (37, 576), (576, 576), (960, 1536))       # (N, K): N off every tile size
KINDS = ("q4_0", "q4_1", "q8_0")                               # the others: test_qk.py


def random_qmatrix(rng, kind: str, rows: int, cols: int) -> QMatrix:
    """Random quants with the float16 scales real weights have (d ~ 1e-2, Q4_1 minimum ~ -8 d)."""
    bb = QUANT_KINDS[kind][1]
    nb = rows * cols // 32
    data = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    d = (rng.normal(0.0, 0.01, nb)).astype(np.float16)
    data[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    if kind == "q4_1":
        data[:, 2:4] = (-8 * np.abs(d) * rng.uniform(0.5, 1.5, nb)).astype(np.float16).view(np.uint8).reshape(nb, 2)
    return QMatrix(kind, data.reshape(rows, cols // 32 * bb), cols)


def fma32(a, b, c):
    """a * b + c for float32 arrays with one rounding (C's fmaf), in float64: a * b is exact there (24 +
    24 bits), TwoSum gives the sum's rounding error e exactly, and the sum rounded to odd (the odd one of
    the two doubles around the exact value) then rounds to float32 as the exact value would (53 >= 24 + 2
    bits: Boldo and Melquiond, "Emulation of FMA and correctly rounded sums", 2008)."""
    prod = np.asarray(a, np.float32).astype(np.float64) * np.asarray(b, np.float32).astype(np.float64)
    c = np.asarray(c, np.float32).astype(np.float64)
    s = prod + c
    bb = s - prod
    e = (prod - (s - bb)) + (c - bb)
    even = (s.view(np.int64) & 1) == 0
    odd = np.where((e != 0) & even, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
    return odd.astype(np.float32)


def test_fma32_is_c_fmaf():
    """The test's fused step against libm's fmaf (C99: exact, then one rounding), on random triples and on
    ones built so that an unfused or twice-rounded sum differs: c = -round(a * b) leaves just the
    product's rounding error."""
    import ctypes
    import ctypes.util

    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.fmaf.argtypes = [ctypes.c_float] * 3
    libm.fmaf.restype = ctypes.c_float
    rng = np.random.default_rng(5)
    a = (rng.normal(0, 1, 3000) * 10.0 ** rng.integers(-3, 4, 3000)).astype(np.float32)
    b = rng.normal(0, 1, 3000).astype(np.float32)
    c = (rng.normal(0, 1, 3000) * 10.0 ** rng.integers(-6, 6, 3000)).astype(np.float32)
    c[:1000] = -(a[:1000] * b[:1000])                            # float32 products: the error alone is left
    c[1000:1500] = (a[1000:1500] * b[1000:1500]) * np.float32(2.0 ** -24)   # near ties of the sum
    want = np.array([libm.fmaf(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)], np.float32)
    np.testing.assert_array_equal(fma32(a, b, c), want)
    assert (fma32(a[:1000], b[:1000], c[:1000]) != a[:1000] * b[:1000] + c[:1000]).sum() > 500


def assert_product(got, x, w):
    """Equal to the float64 product of the rounded x and the weights, up to float32 rounding, relative to |x| . |w|."""
    wd = w.dequantize().astype(np.float64)
    x8 = round_act(np.ascontiguousarray(x)).astype(np.float64)
    ref = x8 @ wd.T
    scale = np.abs(x8) @ np.abs(wd).T + 1e-30
    assert got.dtype == np.float32 and got.shape == ref.shape
    err = np.abs(got - ref) / scale
    assert err.max() < 1e-5, f"worst relative error {err.max():.2e}"


def test_native_library_builds_where_a_compiler_exists():
    require(shutil.which("cc") is not None or shutil.which("gcc") is not None, "no C compiler")
    assert qm.available(), "a C compiler exists but kernels/_native*.so did not load: pip install -e ."


@pytest.mark.parametrize("kind", KINDS)
def test_every_path_matches_dequantize_then_matmul(isa, kind):
    rng = np.random.default_rng(hash((isa, kind)) % 2**32)
    for n, k in SHAPES:
        w = random_qmatrix(rng, kind, n, k)
        for t in TS:
            x = rng.standard_normal((t, k)).astype(np.float32)
            assert_product(qm.qmatmul(x, w), x, w)


@pytest.mark.parametrize("kind", KINDS)
def test_numpy_fallback_matches(monkeypatch, kind):
    rng = np.random.default_rng(1)
    w = random_qmatrix(rng, kind, 37, 576)
    x = rng.standard_normal((5, 576)).astype(np.float32)
    native = qm.qmatmul(x, w)
    monkeypatch.setattr(qm, "_load", lambda: None)
    fallback = qm.qmatmul(x, w)
    assert_product(fallback, x, w)
    np.testing.assert_allclose(native, fallback, rtol=1e-4, atol=1e-4 * np.abs(fallback).max())


@pytest.mark.parametrize("kind", KINDS)
def test_a_row_gives_the_same_bits_alone_and_in_any_batch(isa, kind):
    """The kernels sum each (row, output) in one order whatever tile it falls in: batch invariance."""
    rng = np.random.default_rng(8)
    w = random_qmatrix(rng, kind, 45, 576)
    x = rng.standard_normal((83, 576)).astype(np.float32)                # a long prompt too
    assert_batch_invariant(x, w, (0, 3, 4, 22, 82))


def block_terms(w: QMatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From ggml's block layouts: per (row, block) d and m (0 but for q4_1) as float32, and the integer
    quants (row, block, 32) in element order (q4 kinds: low nibbles are elements 0..15, high 16..31)."""
    bb = QUANT_KINDS[w.kind][1]
    blocks = w.data.reshape(w.data.shape[0], -1, bb)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    if w.kind == "q8_0":
        return d, np.zeros_like(d), blocks[..., 2:].view(np.int8).astype(np.int32)
    qs = blocks[..., 4 if w.kind == "q4_1" else 2:].astype(np.int32)
    q = np.concatenate([qs & 15, qs >> 4], -1) - (8 if w.kind == "q4_0" else 0)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32) if w.kind == "q4_1" else np.zeros_like(d)
    return d, m, q


@pytest.mark.parametrize(("path", "kind"), [("generic", k) for k in KINDS]
                         + [("avx2", "q8_0"), ("avx512", "q8_0"), ("avx2", "q4_0"), ("avx512", "q4_0")])
def test_each_output_sums_its_blocks_in_the_definitions_float_order(path, kind):
    """lb_qmatmul_generic's order, and the q8_0 kernels' of every path (AVX-512 runs AVX2's) and q4_0's
    on AVX2 and AVX-512 bit for bit: per block acc + (d_w * d_x) * p in float32 (p the exact integer
    sum; q4_0's sum fused, one rounding: qk.h's lb_q4_0_step), then q4_1's + m_w * (d_x * sum q_x).
    x sits on its rounding grid, so its quants and scales are known; T and N reach every tile and
    tail (q4_1's vector paths sum per lane)."""
    require(qm.available(), "the native library is not built (pip install -e . with a C compiler builds it)")
    if qm.set_isa(path) != path:
        qm.set_isa("auto")
        pytest.skip(f"this CPU lacks {path}")
    try:
        rng = np.random.default_rng(21)
        w = random_qmatrix(rng, kind, 45, 576)
        T, nb = 35, 576 // 32
        dx = rng.normal(0.0, 0.05, (T, nb)).astype(np.float16).astype(np.float32)
        qx = rng.integers(-127, 128, (T, nb, 32)).astype(np.int32)
        qx[:, :, 5] = 127                                        # max|q| = 127: d is dx exactly
        x = (qx.astype(np.float32) * dx[..., None]).reshape(T, -1)
        np.testing.assert_array_equal(round_act(x), x)           # on the grid: rounding keeps it
        dw, mw, qw = block_terms(w)
        acc = np.zeros((T, w.data.shape[0]), np.float32)
        for b in range(nb):
            p = (qx[:, b] @ qw[:, b].T).astype(np.float32)       # exact: |p| < 2^24
            if kind == "q4_0":
                acc = fma32(p, dw[None, :, b] * dx[:, b, None], acc)
            else:
                acc = acc + (dw[None, :, b] * dx[:, b, None]) * p
            if kind == "q4_1":
                acc = acc + mw[None, :, b] * (dx[:, b] * qx[:, b].sum(-1).astype(np.float32))[:, None]
        for t in (1, 3, 7, 8, 9, 17, 33, T):                     # decode tile, batch tiles and their tails
            np.testing.assert_array_equal(qm.qmatmul(x[:t], w), acc[:t])
    finally:
        qm.set_isa("auto")


def test_activations_round_as_llama_cpp_rounds_them():
    """quantize_row_q8_0: d = max|x| / 127 as float16, q = rint(x / d) with ties to even."""
    x = np.zeros((1, 64), np.float32)
    x[0, :6] = [127.0, 2.5, 3.5, -2.5, -0.49, 0.5]            # max 127: d = 1, q = x rounded to even
    x[0, 32:34] = [1.0, -0.3]                                  # d = float16(1/127), q = 127 and -38
    got = round_act(x)
    np.testing.assert_array_equal(got[0, :6], [127.0, 2.0, 4.0, -2.0, 0.0, 0.0])
    d = np.float32(np.float16(np.float32(1) / np.float32(127)))
    np.testing.assert_array_equal(got[0, 32:34], [127 * d, -38 * d])
    assert not got[0, 34:].any() and got.dtype == np.float32


def test_native_rounding_is_the_numpy_definition_bit_for_bit(isa):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((7, 1536)).astype(np.float32) * np.float32(3)
    x[1] *= np.float32(1e-9)                                   # float16 subnormal scales
    x[2] = np.round(x[2] * 10) / 10                            # many ties after scaling
    x[3, :32] = 0.0                                            # an all-zero block
    x[4] *= np.float32(1e6)
    np.testing.assert_array_equal(qm.rounded(x), round_act(x))


def test_nan_or_inf_in_a_block_reaches_its_outputs(isa):
    rng = np.random.default_rng(10)
    w = random_qmatrix(rng, "q4_1", 8, 64)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    x[1, 40], x[2, 3] = np.nan, np.inf
    out = qm.qmatmul(x, w)
    assert np.isfinite(out[0]).all() and np.isnan(out[1]).all() and np.isnan(out[2]).all()
    assert np.isnan(round_act(x)[1, 32:]).all() and np.isfinite(round_act(x)[1, :32]).all()


def test_non_contiguous_x_and_given_out():
    rng = np.random.default_rng(3)
    w = random_qmatrix(rng, "q4_1", 40, 64)
    wide = rng.standard_normal((6, 128)).astype(np.float32)
    x = wide[::2, ::2]                                         # strided both ways
    out = np.full((3, 40), np.nan, np.float32)
    got = qm.qmatmul(x, w, out=out)
    assert got is out
    assert_product(out, np.ascontiguousarray(x), w)


def test_bad_input_raises_value_error():
    rng = np.random.default_rng(4)
    w = random_qmatrix(rng, "q8_0", 8, 64)
    with pytest.raises(ValueError, match="shape"):
        qm.qmatmul(np.zeros((2, 32), np.float32), w)
    with pytest.raises(ValueError, match="float32"):
        qm.qmatmul(np.zeros((2, 64), np.float64), w)
    with pytest.raises(ValueError, match="out"):
        qm.qmatmul(np.zeros((2, 64), np.float32), w, out=np.zeros((8, 2), np.float32))
    with pytest.raises(ValueError, match="QMatrix"):
        qm.qmatmul(np.zeros((2, 64), np.float32), np.zeros((8, 64), np.float32))


def test_bad_quant_shapes_raise():
    raw = np.zeros(8 * 2 * 20, np.uint8)
    assert from_gguf(raw, "q4_1", 8, 64).shape == (8, 64)
    with pytest.raises(BadQuantShape, match="kind"):
        from_gguf(raw, "q3_k", 8, 64)
    with pytest.raises(BadQuantShape, match="bytes"):
        from_gguf(raw, "q4_1", 8, 96)
    with pytest.raises(BadQuantShape, match="multiple"):
        from_gguf(raw, "q4_1", 8, 60)
    with pytest.raises(BadQuantShape, match="uint8"):
        from_gguf(raw.astype(np.int16), "q4_1", 8, 64)
    assert issubclass(BadQuantShape, ValueError)


def test_dequantize_rows_picks_token_rows():
    rng = np.random.default_rng(5)
    w = random_qmatrix(rng, "q8_0", 50, 64)
    ids = np.array([7, 0, 49, 7])
    np.testing.assert_array_equal(w.dequantize(ids), w.dequantize()[ids])
    assert w.dequantize(ids).dtype == np.float32


def test_float16_scales_convert_exactly_on_every_path(isa):
    """Every finite float16 scale, subnormals included, as d of a Q8_0 block with all quants 1."""
    halves = np.arange(0, 1 << 16, dtype=np.uint16).view(np.float16)
    halves = halves[np.isfinite(halves)]
    n = halves.size // 32 * 32
    data = np.ones((n, 34), np.uint8)
    data[:, 0:2] = halves[:n].view(np.uint8).reshape(n, 2)
    w = QMatrix("q8_0", data, 32)
    x = np.zeros((1, 32), np.float32)
    x[0, 5] = 1.0
    want = halves[:n].astype(np.float32) * round_act(x)[0, 5]          # one rounding, as the kernels
    np.testing.assert_array_equal(qm.qmatmul(x, w)[0], want)


@pytest.mark.slow
def test_dequantize_matches_gguf_on_the_real_model(model_path):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(model_path)
    tensors = {t.name: t for t in reader.tensors}
    for name in ("blk.0.ffn_down.weight", "blk.7.attn_q.weight", "token_embd.weight"):
        t = tensors[name]
        cols, rows = (int(v) for v in t.shape)
        q = from_gguf(t.data, t.tensor_type.name.lower(), rows, cols)
        want = dequantize(t.data, t.tensor_type).reshape(rows, cols)
        np.testing.assert_array_equal(q.dequantize(), want)
        x = np.random.default_rng(6).standard_normal((3, cols)).astype(np.float32)
        assert_product(qm.qmatmul(x, q), x, q)
    ids = np.array([1, 2, 49151])
    emb = tensors["token_embd.weight"]
    q = from_gguf(emb.data, "q8_0", 49152, 576)
    np.testing.assert_array_equal(q.dequantize(ids), dequantize(emb.data, emb.tensor_type).reshape(49152, 576)[ids])
