"""The same kernels and forward on a GPU through cupy with fp16 weights; skipped without cupy/CUDA."""

import numpy as np
import pytest

from kernels.xp import ArrayModuleUnavailable, get_xp
from services.shard.kv_cache import KVConfig, PagedKVCache
from services.shard.local import Chunk, PageAllocator, build_batch
from services.shard.model import ShardModel
from services.modelstore.weight_cache import load_weights
from tests.engine.tiny_gguf import TINY

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    try:
        return get_xp("cupy")
    except ArrayModuleUnavailable as e:
        pytest.skip(str(e))


def test_fp16_forward_on_gpu_follows_the_cpu(cp, tiny_path, tiny_cache):
    loaded = load_weights(tiny_path, 0, TINY["n_layers"], root=tiny_cache)
    cfg = loaded.config
    kv16 = PagedKVCache.for_model(cfg, 0, cfg.n_layers, KVConfig(16, 4), dtype=np.float16, xp=cp)
    gpu = ShardModel(cfg, loaded.weights.to(cp, cp.float16), kv16, xp=cp)
    cpu = ShardModel(cfg, loaded.weights, PagedKVCache.for_model(cfg, 0, cfg.n_layers, KVConfig(16, 4)))
    tokens = [5, 17, 99, 3, 42, 7]
    pg, pc = PageAllocator(16, 4), PageAllocator(16, 4)
    a = gpu.forward(build_batch([Chunk("a", tokens, 0)], pg))
    b = cpu.forward(build_batch([Chunk("a", tokens, 0)], pc))
    assert a.dtype == np.float32 and isinstance(a, np.ndarray) and gpu.kv.k.dtype == cp.float16
    np.testing.assert_allclose(a, b, atol=0.1, rtol=0.05)
    assert int(a.argmax()) == int(b.argmax())
