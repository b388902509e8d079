"""The CPU shard's native layer loop (services/shard/native_layers.py) against the numpy layers."""

import numpy as np
import pytest

from services.modelstore.weight_cache import load_weights
from services.shard.kv_cache import KVConfig, PagedKVCache
from services.shard.inprocess import Chunk, PageAllocator, build_batch
from services.shard.model import ShardModel
from tests.conftest import require
from services.shard.native_layers import NativeLayers
from services.shard.numpy_layers import NumpyLayers

pytestmark = pytest.mark.slow

STEPS = [
    [Chunk("a", list(range(5, 40)), 0), Chunk("b", [7], 0)],               # prefills, one a single token
    [Chunk("a", [9], 35), Chunk("b", list(range(100, 120)), 1)],           # a decode beside a prefill
    [Chunk("a", [11], 36), Chunk("b", [12], 21)],                          # decodes only
    [Chunk("b", [13], 22)],                                                # one sequence alone
]


@pytest.fixture(scope="module")
def quantized(model_path):
    return load_weights(model_path, 0, 30, "quantized")


def run(loaded, native: bool):
    cfg = loaded.config
    kv = PagedKVCache.for_model(cfg, 0, cfg.n_layers, KVConfig(num_pages=16, page_size=16))
    model = ShardModel(cfg, loaded.weights, kv)
    require(isinstance(model.runner, NativeLayers),
            "the native library is not built (pip install -e . with a C compiler builds it)")
    if not native:   # the numpy loop, every row attending alone as in the native one
        model.runner = NumpyLayers(cfg, model.runner.layers, kv, model.start, rows_alone=True)
    pages = PageAllocator(16, 16)
    return [model.forward(build_batch(chunks, pages)) for chunks in STEPS], kv


def test_native_layers_give_the_numpy_logits_bit_for_bit(quantized):
    (native, kv_n), (numpy, kv_p) = run(quantized, True), run(quantized, False)
    for a, b in zip(native, numpy):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(kv_n.k, kv_p.k)
    np.testing.assert_array_equal(kv_n.v, kv_p.v)


def test_a_middle_shard_hands_out_its_own_copy(model_path):
    loaded = load_weights(model_path, 0, 2, "quantized")
    cfg = loaded.config
    kv = PagedKVCache.for_model(cfg, 0, 2, KVConfig(num_pages=16, page_size=16))
    model = ShardModel(cfg, loaded.weights, kv)
    pages = PageAllocator(16, 16)
    first = model.forward(build_batch([Chunk("a", [1, 2, 3], 0)], pages))
    kept = first.copy()
    model.forward(build_batch([Chunk("a", [4, 5, 6], 3)], pages))          # same T: the same buffers inside
    np.testing.assert_array_equal(first, kept)


def test_buffers_of_recent_batch_sizes_are_kept_within_their_budget(model_path, monkeypatch):
    import services.shard.native_layers as nl
    loaded = load_weights(model_path, 0, 2, "quantized")
    cfg = loaded.config
    kv = PagedKVCache.for_model(cfg, 0, 2, KVConfig(num_pages=64, page_size=16))
    model = ShardModel(cfg, loaded.weights, kv)
    require(isinstance(model.runner, NativeLayers), "the native library is not built")
    pages = PageAllocator(64, 16)
    model.forward(build_batch([Chunk(s, [1], 0) for s in range(4)], pages))          # 4 rows
    four = model.runner.scratches[4]
    monkeypatch.setattr(nl, "KEEP_BYTES", 2 * four.nbytes)                            # buffers grow with rows
    for n in (1, 2, 3, 100):                                                           # a long prompt last
        model.forward(build_batch([Chunk(10 + n, list(range(1, n + 1)), 0)], pages))
    kept = model.runner.scratches
    assert list(kept)[-1] == 100                                                       # the newest stays
    assert sum(s.nbytes for s in kept.values()) <= 2 * four.nbytes + kept[100].nbytes
    assert list(kept) == [1, 2, 3, 100]                                                # the least recent went
    one = kept[1]
    again = model.forward(build_batch([Chunk(13, [4], 3)], pages))                     # a kept size: reused
    assert model.runner.scratches[1] is one and again.shape == (1, cfg.d_model)
    assert list(model.runner.scratches)[-1] == 1                                       # now the most recent
