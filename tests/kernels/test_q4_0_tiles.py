"""Q4_0 in tiles of 16 rows (kernels.q4_0_tiles): the C moves are the layout written out in numpy, they
move the bytes and nothing else, and products over tiles have Q4_0's bits on every code path; the
weight cache's "quantized_t16" format tiles the layer matrices alone, and a forward over it gives
the bits of one over GGUF's order."""

import numpy as np
import pytest

from kernels import qmatmul as qm
from kernels.native_lib import load
from kernels.q4_0_tiles import TILED, tile, tile_in_place, untile
from kernels.qmatrix import QMatrix
from tests.conftest import require

from .test_qmatmul import TS, random_qmatrix

SHAPES = ((16, 32), (15, 64), (37, 576), (64, 4096), (960, 1536))     # one tile, none, and tails


def native():
    lib = load()
    require(lib is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    return lib


def test_the_numpy_layout_is_the_one_written_down():
    """Block b of tile i: 16 float16 d (row c at 2c), then quant bytes 4k .. 4k + 3 of row c at
    32 + 64k + 4c; a tile is 16 rows' bytes, and rows past the last whole tile stay as they were."""
    rng = np.random.default_rng(3)
    w = random_qmatrix(rng, "q4_0", 37, 96)                       # 2 tiles, 5 rows left, 3 blocks a row
    t = tile(w.data)
    assert t.shape == w.data.shape and t.dtype == np.uint8
    for n in range(32):
        i, c = divmod(n, 16)
        for b in range(3):
            blk = w.data[n, 18 * b:18 * b + 18]
            at = i * 16 * 54 + 288 * b
            assert bytes(t.flat[at + 2 * c:at + 2 * c + 2]) == bytes(blk[:2])
            for k in range(4):
                q = at + 32 + 64 * k + 4 * c
                assert bytes(t.flat[q:q + 4]) == bytes(blk[2 + 4 * k:6 + 4 * k])
    np.testing.assert_array_equal(t[32:], w.data[32:])


@pytest.mark.parametrize(("rows", "cols"), SHAPES)
def test_the_c_moves_are_the_numpy_ones_and_undo_each_other(rows, cols):
    lib = native()
    w = random_qmatrix(np.random.default_rng(rows), "q4_0", rows, cols)
    want = tile(w.data)
    got = np.empty_like(w.data)
    assert lib.lb_q4_0_tile(w.address, rows, cols, got.ctypes.data) == 0
    np.testing.assert_array_equal(got, want)
    back = np.empty_like(got)
    assert lib.lb_q4_0_untile(got.ctypes.data, rows, cols, back.ctypes.data) == 0
    np.testing.assert_array_equal(back, w.data)
    np.testing.assert_array_equal(untile(want), w.data)
    here = w.data.copy()
    tile_in_place(lib, here)
    np.testing.assert_array_equal(here, want)


def test_bad_arguments_are_refused_and_change_nothing():
    lib = native()
    w = random_qmatrix(np.random.default_rng(0), "q4_0", 32, 64)
    out = np.zeros_like(w.data)
    assert lib.lb_q4_0_tile(w.address, 32, 48, out.ctypes.data) == -2          # K not whole blocks
    assert lib.lb_q4_0_tile(w.address, -1, 64, out.ctypes.data) == -2
    assert lib.lb_q4_0_tile(None, 32, 64, out.ctypes.data) == -2
    assert not out.any()
    with pytest.raises(ValueError, match="writeable"):
        tile_in_place(lib, w.data[:, :36].copy(order="F"))
    ro = w.data.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        tile_in_place(lib, ro)
    with pytest.raises(ValueError, match="18-byte blocks"):
        tile(np.zeros((16, 20), np.uint8))


def test_a_tiled_matrix_dequantizes_as_its_gguf_rows():
    w = random_qmatrix(np.random.default_rng(5), "q4_0", 45, 576)
    t = QMatrix(TILED, tile(w.data), 576)
    np.testing.assert_array_equal(t.dequantize(), w.dequantize())
    np.testing.assert_array_equal(t.dequantize(rows=[44, 3, 17]), w.dequantize(rows=[44, 3, 17]))


def test_products_over_tiles_have_q4_0s_bits_on_every_path(isa):
    rng = np.random.default_rng(11)
    for rows, cols in SHAPES:
        w = random_qmatrix(rng, "q4_0", rows, cols)
        t = QMatrix(TILED, tile(w.data), cols)
        for n in TS:
            x = rng.standard_normal((n, cols)).astype(np.float32)
            np.testing.assert_array_equal(qm.qmatmul(x, t).view(np.uint32), qm.qmatmul(x, w).view(np.uint32))


def test_a_shard_over_tiles_runs_the_forward_of_gguf_order_bit_for_bit(tmp_path):
    """The weight cache's quantized_t16: the layer matrices tiled, the embedding (looked up by row) and
    the head not; the same logits, bit for bit, as the "quantized" entry's, on the path in use."""
    native()
    from bench.synthetic import Shape, synthetic_model
    from services.modelstore.weight_cache import load_weights
    from services.shard.inprocess import Chunk, PageAllocator, build_batch
    from services.shard.kv_cache import KVConfig, PagedKVCache
    from services.shard.model import ShardModel

    path = synthetic_model(Shape(n_layers=2, d_model=256, ffn_dim=512, n_heads=4, n_kv_heads=2), "q4_0",
                           cache=tmp_path)
    logits = {}
    for fmt in ("quantized", "quantized_t16"):
        for cold in (True, False):
            loaded = load_weights(path, 0, 2, fmt, root=tmp_path / "cache")
            assert loaded.cold == cold and loaded.path.name.startswith(f"0-2-{fmt}-")
            w = loaded.weights
            layer_kind = "q4_0_t16" if fmt == "quantized_t16" else "q4_0"
            assert {w.wqkv.kind, w.wo.kind, w.w_gate_up.kind, w.w_down.kind} == {layer_kind}
            assert w.token_embd.kind == "q4_0"
            kv = PagedKVCache.for_model(loaded.config, 0, 2, KVConfig(8, 16))
            model = ShardModel(loaded.config, w, kv)
            pages = PageAllocator(8, 16)
            first = model.forward(build_batch([Chunk("a", [1, 500, 9000, 40000, 7], 0)], pages))
            then = model.forward(build_batch([Chunk("a", [123], 5)], pages))
            logits[fmt, cold] = np.concatenate([first, then])
    want = logits["quantized", True]
    assert np.isfinite(want).all()
    for got in logits.values():
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_cpu_shard_loads_tiles_where_an_x86_vector_path_runs(isa):
    from services.shard.service import weight_format
    want = "quantized_t16" if isa in ("avx2", "avx512") else "quantized"
    assert weight_format("cpu", "auto") == weight_format("cpu", "quantized") == want
    assert weight_format("cpu", "float32") == "float32"
    assert weight_format("cuda", "auto") == "quantized"            # the GPU's kernels read GGUF's order
