"""The forward on a tiny random llama against a plain float64 implementation, over real paging."""

import numpy as np
import pytest

from services.shard.inprocess import Chunk, PageAllocator, Pipeline, build_batch
from tests.engine import naive_llama
from tests.engine.conftest import make_shard

TOKENS = [5, 17, 99, 3, 42, 42, 7, 64, 1, 100, 23, 8, 15, 16, 77, 2, 9, 31, 54]
# Both round k and v to float16 where the cache stores them, but a float32 k a few ulps from the
# float64 one lands on the other side of a float16 rounding boundary now and then: one float16 ulp
# (2^-11 of the value) of one key moves these logits by up to ~1e-3. A layout or RoPE mistake moves
# them by far more.
TOL = 5e-3


@pytest.fixture(scope="module")
def naive(tiny_path):
    return naive_llama.logits(tiny_path, TOKENS)


def test_prefill_then_decode_matches_plain_forward(tiny_path, tiny_cache, naive):
    shard = make_shard(tiny_path, 0, 3, num_pages=16, page_size=4, root=tiny_cache)
    pages = PageAllocator(16, 4)
    got = [shard.forward(build_batch([Chunk("a", TOKENS[:7], 0)], pages))[0]]
    for i in range(7, len(TOKENS)):
        got.append(shard.forward(build_batch([Chunk("a", [TOKENS[i]], i)], pages))[0])
    np.testing.assert_allclose(np.array(got), naive[6:], rtol=TOL, atol=TOL)


def test_chunked_prefill_across_pages_matches(tiny_path, tiny_cache, naive):
    shard = make_shard(tiny_path, 0, 3, num_pages=16, page_size=4, root=tiny_cache)
    pages = PageAllocator(16, 4)
    pages.ensure("other", 5)                      # the sequence's pages are not 0, 1, 2...
    for start in range(0, len(TOKENS), 5):        # chunks of 5 straddle page boundaries
        out = shard.forward(build_batch([Chunk("a", TOKENS[start:start + 5], start)], pages))
        np.testing.assert_allclose(out[0], naive[min(start + 4, len(TOKENS) - 1)], rtol=TOL, atol=TOL)


def test_mixed_prefill_and_decode_batch(tiny_path, tiny_cache, naive):
    """Sequences at different positions, prefilling and decoding in one batch, each get their own logits."""
    shard = make_shard(tiny_path, 0, 3, num_pages=32, page_size=4, root=tiny_cache)
    pages = PageAllocator(32, 4)
    shard.forward(build_batch([Chunk("a", TOKENS[:10], 0), Chunk("b", TOKENS[:3], 0)], pages))
    out = shard.forward(build_batch([Chunk("b", TOKENS[3:9], 3),       # prefill chunk
                                     Chunk("a", [TOKENS[10]], 10),     # decode
                                     Chunk("c", [TOKENS[0]], 0),       # a one-token prompt
                                     Chunk("d", TOKENS[:4], 0)], pages))
    np.testing.assert_allclose(out, naive[[8, 10, 0, 3]], rtol=TOL, atol=TOL)


def test_want_logits_selects_sequences(tiny_path, tiny_cache, naive):
    shard = make_shard(tiny_path, 0, 3, root=tiny_cache)
    out = shard.forward(build_batch([Chunk("a", TOKENS[:4], 0), Chunk("b", TOKENS[:6], 0)],
                                    PageAllocator(64, 16), want_logits=[False, True]))
    assert out.shape == (1, 101)
    np.testing.assert_allclose(out[0], naive[5], rtol=TOL, atol=TOL)


def test_split_shards_give_identical_logits(tiny_path, tiny_cache):
    one = make_shard(tiny_path, 0, 3, root=tiny_cache)
    three = Pipeline([make_shard(tiny_path, a, a + 1, root=tiny_cache) for a in range(3)])
    pa, pb = PageAllocator(64, 16), PageAllocator(64, 16)
    for chunk in (Chunk("a", TOKENS[:9], 0), Chunk("a", [TOKENS[9]], 9), Chunk("a", [TOKENS[10]], 10)):
        np.testing.assert_array_equal(one.forward(build_batch([chunk], pa)), three.forward(build_batch([chunk], pb)))


def test_middle_shard_returns_float32_hidden(tiny_path, tiny_cache):
    first = make_shard(tiny_path, 0, 1, root=tiny_cache)
    h = first.forward(build_batch([Chunk("a", TOKENS[:5], 0)], PageAllocator(64, 16)))
    assert h.dtype == np.float32 and h.shape == (5, 64)


def test_forward_never_leaves_float32(tiny_path, tiny_cache):
    seen = []
    shard = make_shard(tiny_path, 0, 3, root=tiny_cache, trace=lambda name, a: seen.append((name, a.dtype)))
    pages = PageAllocator(64, 16)
    out = shard.forward(build_batch([Chunk("a", TOKENS[:6], 0), Chunk("b", TOKENS[:1], 0)], pages))
    out2 = shard.forward(build_batch([Chunk("a", [TOKENS[6]], 6), Chunk("b", [TOKENS[1]], 1)], pages))
    assert {"embed", "attn", "h", "logits"} <= {n for n, _ in seen}
    assert {d for _, d in seen} == {np.dtype(np.float32)}
    assert out.dtype == out2.dtype == np.float32
    assert shard.kv.k.dtype == shard.kv.v.dtype == np.float16     # the cache, as llama.cpp's
