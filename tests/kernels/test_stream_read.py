"""lb_pool_read (kernels/native/stream_read.c), the read behind bench/bandwidth.py's ceiling for the
kernels' threads: every byte is read once, whatever the thread count and however the size falls."""

import numpy as np
import pytest

from kernels import native_lib
from tests.conftest import require


@pytest.fixture(autouse=True)
def one_thread_after():
    require(native_lib.load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    yield
    native_lib.set_threads(1)


def expected(buf: np.ndarray) -> int:
    """The sum of buf's whole little-endian uint64 words, then of its bytes past them, mod 2^64."""
    whole = buf.nbytes // 8 * 8
    words = buf[:whole].view("<u8").astype(object)
    return (int(sum(words.tolist())) + int(buf[whole:].astype(np.int64).sum())) % 2**64


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 64, 1000, 1 << 16, (1 << 20) + 13])
def test_every_byte_is_read_once(threads, size):
    buf = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    native_lib.set_threads(threads)
    assert native_lib.load().lb_pool_read(buf.ctypes.data, size) == expected(buf)


def test_words_past_the_pool_size_are_not_read_twice():
    """Fewer whole words than threads: each word goes to one piece alone."""
    buf = np.full(24, 255, np.uint8)                # three words of all ones
    native_lib.set_threads(4)
    assert native_lib.load().lb_pool_read(buf.ctypes.data, 24) == (3 * (2**64 - 1)) % 2**64


def test_pool_read_arrays_reads_each_array_and_keeps_the_pool_size():
    """bench/bandwidth.pool_read_arrays: every byte of the arrays counted once, on the asked threads,
    and the pool left at the size it had."""
    from bench.bandwidth import pool_read_arrays

    arrays = [np.ones(1 << 20, np.uint8), np.ones(3000, np.float32)]
    native_lib.set_threads(3)
    assert pool_read_arrays(arrays, 2, rounds=1) > 0
    assert native_lib.threads() == 3


def test_pool_read_arrays_refuses_what_it_cannot_read_whole():
    from bench.bandwidth import pool_read_arrays

    with pytest.raises(ValueError, match="C-contiguous"):
        pool_read_arrays([np.ones((64, 64), np.float32)[:, ::2]], 1)
    with pytest.raises(ValueError, match="aligned"):
        pool_read_arrays([np.ones(65, np.uint8)[1:]], 1)


def test_weight_arrays_are_the_model_weights_each_once(model_path):
    """bench/bandwidth.weight_arrays lists what a forward streams: the shard's weights, a tied head
    once (SmolLM2's output is its token embedding), byte for byte what ShardWeights counts."""
    from bench.bandwidth import weight_arrays
    from services.modelstore.weight_cache import load_weights

    w = load_weights(model_path, 0, 30, "quantized").weights
    arrays = weight_arrays(w)
    assert w.output is w.token_embd
    assert sum(a.nbytes for a in arrays) == w.nbytes()
    assert len({a.ctypes.data for a in arrays}) == len(arrays)
    assert any(a is w.token_embd.data for a in arrays)
