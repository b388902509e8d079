"""Kernels: the math against plain formulas, and each returns the dtype it was given."""

import subprocess
import sys

import numpy as np
import pytest

from kernels.attention import attend_decode, attend_prefill, write_kv
from kernels.ffn import feed_forward, silu, swiglu
from kernels.matmul import matmul, small_block
from kernels.norm import rms_norm
from kernels.rope import apply_rope, rope_tables
from kernels.softmax import softmax
from kernels.xp import get_xp

rng = np.random.default_rng(0)
DTYPES = [np.float32, np.float16]


def r(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(dtype):
    x, w = r(5, 64, dtype=dtype), r(64, dtype=dtype)
    y = rms_norm(np, x, w, 1e-5)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * w
    assert y.dtype == dtype
    np.testing.assert_allclose(y, want, rtol=2e-3 if dtype == np.float16 else 1e-5, atol=1e-2 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_and_masking(dtype):
    x = r(3, 7, dtype=dtype)
    x[0, 4:] = -np.inf
    p = softmax(np, x)
    assert p.dtype == dtype
    np.testing.assert_allclose(p.astype(np.float64).sum(-1), 1, rtol=1e-2 if dtype == np.float16 else 1e-6)
    assert (p[0, 4:] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu(dtype):
    g, u = r(4, 8, dtype=dtype), r(4, 8, dtype=dtype)
    out = swiglu(np, np.concatenate([g, u], axis=1))
    assert out.dtype == dtype and silu(np, g).dtype == dtype
    g64 = g.astype(np.float64)
    np.testing.assert_allclose(out, g64 / (1 + np.exp(-g64)) * u, rtol=1e-2 if dtype == np.float16 else 1e-5, atol=1e-3)
    assert feed_forward(np, r(4, 6, dtype=dtype), r(16, 6, dtype=dtype), r(6, 8, dtype=dtype)).dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("t", [1, 3, 8, 16, 40, 120])
def test_matmul_split_into_row_blocks_is_the_same_product(dtype, t):
    x, w = r(t, 576, dtype=dtype), r(1000, 576, dtype=dtype)            # 1000 rows: the last block is short
    want = x.astype(np.float64) @ w.astype(np.float64).T
    for split in (False, True):
        y = matmul(np, x, w, split)
        assert y.dtype == dtype and y.shape == (t, 1000)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-3)
    assert (small_block(t, 576) is None) == (t in (1, 120))             # the path the test meant to cover


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_rotates_adjacent_pairs_by_relative_position(dtype):
    cos, sin = rope_tables(np, np.array([0, 3, 10, 13]), 16, 10000.0, dtype)
    assert cos.dtype == sin.dtype == dtype and cos.shape == (4, 8)
    q = np.repeat(r(1, 2, 16), 4, axis=0).astype(dtype)
    k = np.repeat(r(1, 2, 16), 4, axis=0).astype(dtype)
    qr, kr = apply_rope(np, q, cos, sin), apply_rope(np, k, cos, sin)
    assert qr.dtype == dtype
    np.testing.assert_array_equal(qr[0], q[0])                              # position 0 is identity
    np.testing.assert_allclose(np.linalg.norm(qr.astype(np.float64), axis=-1),
                               np.linalg.norm(q.astype(np.float64), axis=-1), rtol=2e-3)
    # the score of q at p and k at p' depends on p - p' only: (3, 0) and (13, 10)
    s1 = (qr[1].astype(np.float64) * kr[0]).sum(-1)
    s2 = (qr[3].astype(np.float64) * kr[2]).sum(-1)
    np.testing.assert_allclose(s1, s2, rtol=1e-2 if dtype == np.float16 else 1e-4, atol=1e-3)
    # adjacent pairs: dims 0 and 1 turn together by the angle pos * base^0 = pos
    x0, x1 = q[1, :, 0].astype(np.float64), q[1, :, 1].astype(np.float64)
    np.testing.assert_allclose(qr[1, :, 0], x0 * np.cos(3) - x1 * np.sin(3), rtol=1e-2, atol=1e-3)


def test_partial_rope_leaves_the_rest_alone():
    x = r(2, 3, 16)
    cos, sin = rope_tables(np, np.array([5, 9]), 8, 10000.0, np.float32)
    y = apply_rope(np, x, cos, sin)
    np.testing.assert_array_equal(y[..., 8:], x[..., 8:])
    assert not np.allclose(y[..., :8], x[..., :8])


def dense_attention(q, k, v):
    """q (n, H, Dh) at the last n positions of k, v (C, KVH, Dh), causal, float64."""
    n, h, dh = q.shape
    c, kvh, _ = k.shape
    out = np.zeros((n, h, dh))
    for i in range(n):
        for head in range(h):
            kk, vv = k[: c - n + i + 1, head // (h // kvh)], v[: c - n + i + 1, head // (h // kvh)]
            s = kk @ q[i, head] / np.sqrt(dh)
            p = np.exp(s - s.max())
            out[i, head] = p / p.sum() @ vv
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_attention_matches_dense(dtype):
    page_size, pages, h, kvh, dh = 4, 12, 6, 2, 8
    kc, vc = np.zeros((pages, page_size, kvh, dh), dtype), np.zeros((pages, page_size, kvh, dh), dtype)
    lens = [9, 3, 6]
    tables = [[7, 2, 10], [5], [0, 11]]                                    # scattered pages
    # float16 values: what a cache holds and attention rounds q to, so the paging is compared exactly
    f16 = lambda *shape: r(*shape, dtype=dtype).astype(np.float16).astype(dtype)  # noqa: E731
    ks = [f16(n, kvh, dh) for n in lens]
    vs = [f16(n, kvh, dh) for n in lens]
    for t, k, v in zip(tables, ks, vs):
        pos = np.arange(len(k))
        write_kv(kc, vc, k, v, np.array(t)[pos // page_size], pos % page_size)
    scale = dtype(1 / np.sqrt(dh))
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == np.float16 else dict(rtol=1e-5, atol=1e-5)
    # decode: the last token of every sequence, all at once
    q = f16(3, h, dh)
    width = max(len(t) for t in tables)
    table = np.array([t + [0] * (width - len(t)) for t in tables])
    bias = np.where(np.arange(width * page_size)[None] < np.array(lens)[:, None], 0, -np.inf).astype(dtype)
    out = attend_decode(np, q, kc, vc, table, bias, scale)
    assert out.dtype == dtype
    for s in range(3):
        np.testing.assert_allclose(out[s], dense_attention(q[s:s + 1].astype(np.float64), ks[s], vs[s])[0], **tol)
    # prefill: the last 5 tokens of sequence 0, causal among themselves
    qp = f16(5, h, dh)
    outp = attend_prefill(np, qp, kc, vc, np.array(tables[0]), 4, scale)
    assert outp.dtype == dtype
    np.testing.assert_allclose(outp, dense_attention(qp.astype(np.float64), ks[0], vs[0]), **tol)


def test_xp_picks_numpy_and_refuses_unknown():
    assert get_xp("numpy") is np
    with pytest.raises(ValueError, match="torch"):
        get_xp("torch")


def test_kernels_and_engine_do_not_import_cupy():
    code = ("import sys, services.shard.model, services.shard.inprocess, kernels.xp; "
            "sys.exit('cupy' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
