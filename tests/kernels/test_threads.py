"""Threads in the native kernels (kernels/native/pool.c): every thread count gives the bits of one
thread, for the quantized matmul, the paged attention and a whole shard forward; the pool survives a
fork and a resize."""

import os

import numpy as np
import pytest

import kernels.attention_native as an
from kernels import native_lib
from kernels import qmatmul as qm
from kernels.q4_0_tiles import TILED, tile
from kernels.qmatrix import QUANT_KINDS, QMatrix
from tests.conftest import require
from tests.kernels.test_attention_native import case
from tests.kernels.test_qk import weights as k_weights
from tests.kernels.test_qmatmul import random_qmatrix
from tests.waiting import until_sync

COUNTS = (2, 3, 4)


@pytest.fixture(autouse=True)
def one_thread_after():
    require(native_lib.load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    yield
    native_lib.set_threads(1)


def per_thread_count(compute):
    native_lib.set_threads(1)
    want = compute()
    for n in COUNTS:
        assert native_lib.set_threads(n) == n
        yield n, compute(), want


@pytest.mark.parametrize("kind", sorted(QUANT_KINDS))
def test_qmatmul_bits_do_not_depend_on_threads(isa, kind):
    # T from a decode (weight rows split) to a prompt (activation rows split), N off every tile and
    # piece size, and one product too small to split
    rng = np.random.default_rng(15)
    per = QUANT_KINDS[kind][0]                       # a K kind's rows are whole 256-element blocks
    for n_out, k in ((37, 64), (577, 576), (1541, 96)):
        k = -(-k // per) * per
        if kind == TILED:                            # Q4_0's real scales, in tiles
            w = QMatrix(TILED, tile(random_qmatrix(rng, "q4_0", n_out, k).data), k)
        else:
            w = k_weights(rng, kind, n_out, k) if per > 32 else random_qmatrix(rng, kind, n_out, k)
        for t in (1, 2, 5, 17, 70, 131):
            x = rng.standard_normal((t, k)).astype(np.float32)
            for n, got, want in per_thread_count(lambda: qm.qmatmul(x, w)):
                np.testing.assert_array_equal(got, want, err_msg=f"{n} threads, T={t}, N={n_out}, K={k}")


def test_attention_bits_do_not_depend_on_threads(isa):
    scale = np.float32(0.125)
    cases = [case(20, s_=1), case(21, s_=16, h=8, kvh=2, num_pages=512, max_len=300),
             case(22, s_=7, dh=20, page=3, max_len=40)]
    q, kc, vc, table, _, _ = case(23, s_=2, max_len=300)
    end = table.shape[1] * 16                                            # a prompt: its last 75 rows
    n = min(75, end)
    q = np.random.default_rng(24).standard_normal((n, *q.shape[1:]), dtype=np.float32)
    cases.append((q, kc, vc, np.repeat(table[1:], n, axis=0), np.arange(end - n + 1, end + 1, dtype=np.int32), None))
    for q, kc, vc, table, lens, _ in cases:
        for threads, got, want in per_thread_count(lambda: an.attend_decode_paged(q, kc, vc, table, lens, scale)):
            np.testing.assert_array_equal(got, want, err_msg=f"{threads} threads, {len(lens)} rows")


def test_attention_of_fewer_rows_than_threads_splits_heads_without_changing_bits(isa):
    # fewer rows than threads: each row's heads go in ranges, which at 4 threads cut through the
    # query heads of one KV head (9 heads in 4 ranges); one KV head of 4 query heads (gemma3's), a
    # sliding window, 2-3 rows, and 40 heads (scores go 16 heads at a time from a range's first)
    scale = np.float32(0.125)
    cases = [(case(30, s_=1, max_len=200), 0), (case(31, s_=1, h=4, kvh=1, dh=256, max_len=200), 64),
             (case(32, s_=2, h=8, kvh=2, max_len=200), 0), (case(33, s_=3, max_len=200), 37),
             (case(34, s_=1, h=40, kvh=8, max_len=200), 0)]       # ranges that start inside a block of 16 heads
    for (q, kc, vc, table, lens, _), window in cases:
        def attend():
            return an.attend_decode_paged(q, kc, vc, table, lens, scale, window)
        for threads, got, want in per_thread_count(attend):
            np.testing.assert_array_equal(got, want, err_msg=f"{threads} threads, {len(lens)} rows, "
                                                             f"{q.shape[1]} heads, window {window}")


@pytest.mark.slow
def test_shard_logits_do_not_depend_on_threads(model_path):
    from services.modelstore.weight_cache import load_weights
    from services.shard.inprocess import PageAllocator, build_batch
    from services.shard.kv_cache import KVConfig, PagedKVCache
    from services.shard.model import ShardModel
    from tests.kernels.test_native_layers import STEPS

    loaded = load_weights(model_path, 0, 30, "quantized")
    cfg = loaded.config

    def forward():
        kv = PagedKVCache.for_model(cfg, 0, cfg.n_layers, KVConfig(num_pages=16, page_size=16))
        model = ShardModel(cfg, loaded.weights, kv)
        pages = PageAllocator(16, 16)
        return [model.forward(build_batch(chunks, pages)) for chunks in STEPS] + [kv.k.copy(), kv.v.copy()]

    for n, got, want in per_thread_count(forward):
        for i, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(a, b, err_msg=f"{n} threads, output {i}")


def test_set_threads_resizes_and_rejects_nonsense():
    assert native_lib.set_threads(3) == 3 and native_lib.threads() == 3
    assert native_lib.set_threads(1) == 1 and native_lib.threads() == 1
    with pytest.raises(ValueError):
        native_lib.set_threads(0)


def test_a_forked_child_computes_without_the_parents_workers():
    rng = np.random.default_rng(3)
    w = random_qmatrix(rng, "q4_0", 577, 576)
    x = rng.standard_normal((3, 576)).astype(np.float32)
    native_lib.set_threads(3)
    want = qm.qmatmul(x, w)
    pid = os.fork()
    if pid == 0:                                   # the child: no workers survive fork, still the same bits
        ok = native_lib.threads() == 1 and np.array_equal(qm.qmatmul(x, w), want)
        ok = ok and native_lib.set_threads(2) == 2 and np.array_equal(qm.qmatmul(x, w), want)
        os._exit(0 if ok else 1)
    ended = []

    def child_ended():
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            ended.append(status)
        return ended

    until_sync(child_ended, timeout=60, what="the child's exit")
    assert os.waitstatus_to_exitcode(ended[0]) == 0, "the child computed other bits or hung its pool"


def test_shard_threads_default_to_this_process_cores_shared_among_shards():
    from services.cli import build_parser
    from services.shard.config import default_threads
    cores = len(os.sched_getaffinity(0))
    assert default_threads() == cores and default_threads(cores + 1) == 1
    parser = build_parser()
    args = parser.parse_args(["run", "shard", "--layers", "0:2", "--threads", "3"])
    assert args.threads == 3 and args.blas_threads == 1           # BLAS stays at 1 beside the pool
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "shard", "--layers", "0:2", "--threads", "0"])


def test_a_shard_config_refuses_no_threads():
    from pathlib import Path

    from services.shard.service import ShardConfig
    with pytest.raises(ValueError, match="threads"):
        ShardConfig(model=Path("m.gguf"), start=0, end=2, threads=0)


def test_swiglu_bits_do_not_depend_on_threads(isa):
    from kernels.ffn import native_swiglu
    rng = np.random.default_rng(40)
    for t in (0, 1, 11, 64, 300):                                    # none, one piece, several
        gu = (rng.standard_normal((t, 2 * 1536)) * 4).astype(np.float32)
        for threads, got, want in per_thread_count(lambda: native_swiglu(gu)):
            np.testing.assert_array_equal(got, want, err_msg=f"{threads} threads, {t} rows")
