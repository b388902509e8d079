"""The quantized matmul equals x @ dequantize(w).T on every code path, and its dequantization is ggml's."""

import shutil

import numpy as np
import pytest

from kernels import qmatmul as qm
from kernels.qmatrix import QUANT_KINDS, BadQuantShape, QMatrix, from_gguf

TS = (1, 2, 3, 4, 5, 8, 16, 17, 33, 64)
SHAPES = ((37, 32), (37, 576), (576, 576), (960, 1536))       # (N, K): N off every tile size
NATIVE_ISAS = ("generic", "avx2", "avx512")


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


def assert_product(got, x, w):
    """Equal to the float64 product up to float32 summation rounding, relative to |x| . |w|."""
    wd = w.dequantize().astype(np.float64)
    ref = x.astype(np.float64) @ wd.T
    scale = np.abs(x).astype(np.float64) @ np.abs(wd).T + 1e-30
    assert got.dtype == np.float32 and got.shape == ref.shape
    err = np.abs(got - ref) / scale
    assert err.max() < 1e-5, f"worst relative error {err.max():.2e}"


@pytest.fixture(params=NATIVE_ISAS)
def isa(request):
    if not qm.available():
        pytest.skip("native library not built")
    got = qm.set_isa(request.param)
    if got != request.param:
        pytest.skip(f"this CPU lacks {request.param}")
    yield got
    qm.set_isa("auto")


def test_native_library_builds_where_a_compiler_exists():
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    assert qm.available(), "a C compiler exists but kernels/_native*.so did not load: pip install -e ."


@pytest.mark.parametrize("kind", sorted(QUANT_KINDS))
def test_every_path_matches_dequantize_then_matmul(isa, kind):
    rng = np.random.default_rng(hash((isa, kind)) % 2**32)
    for n, k in SHAPES:
        w = random_qmatrix(rng, kind, n, k)
        for t in TS:
            x = rng.standard_normal((t, k)).astype(np.float32)
            assert_product(qm.qmatmul(x, w), x, w)


@pytest.mark.parametrize("kind", sorted(QUANT_KINDS))
def test_numpy_fallback_matches(monkeypatch, kind):
    rng = np.random.default_rng(1)
    w = random_qmatrix(rng, kind, 37, 576)
    x = rng.standard_normal((5, 576)).astype(np.float32)
    native = qm.qmatmul(x, w)
    monkeypatch.setattr(qm, "_load", lambda: None)
    fallback = qm.qmatmul(x, w)
    assert_product(fallback, x, w)
    np.testing.assert_allclose(native, fallback, rtol=1e-4, atol=1e-4 * np.abs(fallback).max())


def test_one_hot_rows_give_the_exact_weights(isa):
    """x = identity picks out single weights: the kernel's dequantization is bit-exact (q4_1's m too)."""
    rng = np.random.default_rng(2)
    for kind in QUANT_KINDS:
        w = random_qmatrix(rng, kind, 9, 64)
        eye = np.eye(64, dtype=np.float32)
        np.testing.assert_array_equal(qm.qmatmul(eye, w), w.dequantize().T)


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
        from_gguf(raw, "q5_k", 8, 64)
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
    np.testing.assert_array_equal(qm.qmatmul(x, w)[0], halves[:n].astype(np.float32))


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


@pytest.mark.parametrize("kind", sorted(QUANT_KINDS))
def test_long_prompts_go_through_a_dequantized_copy_and_blas(kind, monkeypatch):
    """From BLAS_ROWS rows the weight is dequantized natively (exactly) and BLAS multiplies."""
    if not qm.available():
        pytest.skip("native library not built")
    rng = np.random.default_rng(7)
    w = random_qmatrix(rng, kind, 200, 576)
    wf = qm._dequantized(qm._load(), w)
    np.testing.assert_array_equal(wf, w.dequantize())
    x = rng.standard_normal((qm.BLAS_ROWS + 3, 576), dtype=np.float32)
    assert_product(qm.qmatmul(x, w), x, w)
    small = random_qmatrix(rng, kind, 37, 576)                # the scratch buffer is reused, cut to size
    assert_product(qm.qmatmul(x, small), x, small)
