"""numpy references of the device's kernels other than the quantized products (ref_quant.py).

Each takes the arguments of the CUDA kernel of its name, in order (arrays for pointers: views into
the device buffers, written in place), and computes it with the CPU's own definitions: RMSNorm
(kernels.norm), RoPE (kernels.rope), the gates (kernels.ffn), decode attention read from the
pages (kernels.attention_native) and the sampler's greedy rows (kernels.sampling). Where a
kernel sums in another order (a block reduction) or calls CUDA's expf/tanhf, the GPU tests allow
for it; everything else is the same arithmetic.
"""

from __future__ import annotations

import numpy as np

from kernels.attention_native import attend_decode_paged
from kernels.ffn import gelu_tanh, silu
from kernels.norm import rms_norm as _rms_norm
from kernels.rope import apply_rope

F32 = np.float32


def _rows(a: np.ndarray, rows: int, d: int) -> np.ndarray:
    """The first rows x d elements of a contiguous buffer as a (rows, d) view."""
    return a.reshape(-1)[:rows * d].reshape(rows, d)


def rms_norm(x, w, out, rows, d, eps) -> None:
    _rows(out, rows, d)[...] = _rms_norm(np, _rows(x, rows, d), w[:d], F32(eps))


def add_rms_norm(h, delta, w, out, rows, d, eps) -> None:
    hv = _rows(h, rows, d)
    hv += _rows(delta, rows, d)
    _rows(out, rows, d)[...] = _rms_norm(np, hv, w[:d], F32(eps))


def add_rows(h, delta, n) -> None:
    h.reshape(-1)[:n] += delta.reshape(-1)[:n]


def gather_rows(src, idx, dst, n_rows, d) -> None:
    _rows(dst, n_rows, d)[...] = src.reshape(-1, d)[idx.reshape(-1)[:n_rows]]


def softcap(x, n, cap) -> None:
    v, c = x.reshape(-1)[:n], F32(cap)
    v[...] = np.tanh(v / c) * c


def swiglu(gu, out, rows, f) -> None:
    g = _rows(gu, rows, 2 * f)
    _rows(out, rows, f)[...] = silu(np, g[:, :f]) * g[:, f:]


def geglu(gu, out, rows, f) -> None:
    g = _rows(gu, rows, 2 * f)
    _rows(out, rows, f)[...] = gelu_tanh(np, g[:, :f]) * g[:, f:]


def qkv_rope_kv(qkv, bias, has_bias, q_norm, k_norm, has_qk_norm, eps, pos, slot, freqs, mscale, n_rot, t_rows,
                n_heads, n_kv, dh, q_out, k_cache, v_cache) -> None:
    t, nq, nk = t_rows, n_heads * dh, n_kv * dh
    x = _rows(qkv, t, nq + 2 * nk).copy()
    if has_bias:
        x += bias[:nq + 2 * nk]
    q, k, v = x[:, :nq].reshape(t, n_heads, dh), x[:, nq:nq + nk].reshape(t, n_kv, dh), x[:, nq + nk:]
    if has_qk_norm:
        q, k = _rms_norm(np, q, q_norm[:dh], F32(eps)), _rms_norm(np, k, k_norm[:dh], F32(eps))
    angles = pos[:t].astype(np.float64)[:, None] * freqs[:n_rot // 2][None, :]      # as kernels.rope.rope_tables
    cos, sin = (np.cos(angles) * float(mscale)).astype(F32), (np.sin(angles) * float(mscale)).astype(F32)
    _rows(q_out, t, nq)[...] = apply_rope(np, q, cos, sin).reshape(t, nq)
    live = slot[:t] >= 0
    kc, vc = k_cache.reshape(-1, n_kv, dh), v_cache.reshape(-1, n_kv, dh)
    kc[slot[:t][live]] = apply_rope(np, k, cos, sin)[live].astype(kc.dtype)
    vc[slot[:t][live]] = v.reshape(t, n_kv, dh)[live].astype(vc.dtype)


def paged_attention(q, k_cache, v_cache, table, table_stride, row_seq, row_len, t_rows, n_heads, n_kv, dh,
                    page_size, window, scale, out) -> None:
    """Each row as a decode row of its own (its sequence's pages, row_len[t] keys) through the CPU's
    paged decode attention over the float16 caches' pages it reads."""
    o = _rows(out, t_rows, n_heads * dh).reshape(t_rows, n_heads, dh)
    o[...] = 0
    lens = row_len[:t_rows].astype(np.int32)
    live = np.flatnonzero(lens > 0)
    if not live.size:
        return
    n_pages = int((lens.max() + page_size - 1) // page_size)
    tab = np.maximum(table.reshape(-1, table_stride)[row_seq[:t_rows][live]][:, :n_pages], 0)
    used, tab = np.unique(tab, return_inverse=True)             # only the pages read
    kc = np.ascontiguousarray(k_cache.reshape(-1, page_size, n_kv, dh)[used], dtype=np.float16)
    vc = np.ascontiguousarray(v_cache.reshape(-1, page_size, n_kv, dh)[used], dtype=np.float16)
    qs = _rows(q, t_rows, n_heads * dh).reshape(t_rows, n_heads, dh)[live]
    o[live] = attend_decode_paged(qs, kc, vc, tab.reshape(live.size, n_pages).astype(np.int32), lens[live],
                                  F32(scale), int(window))


def greedy_top(logits, v, row_idx, rows, n_top, token, logprob, rowmax, top_ids, top_lp) -> None:
    """kernels.sampling.sample's greedy rows: argmax (lowest id on ties), log-probabilities under the
    raw softmax, the n_top best ids by value then id; rowmax NaN where a row holds NaN."""
    z = logits.reshape(-1, v)[row_idx.reshape(-1)[:rows]]
    nan = np.isnan(z)
    zc = np.where(nan, -np.inf, z).astype(F32)
    best = zc.max(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        lse = best + np.log(np.exp(z - best[:, None]).sum(axis=1, dtype=F32))
    tok = zc.argmax(axis=1)
    token.reshape(-1)[:rows] = tok
    logprob.reshape(-1)[:rows] = z[np.arange(rows), tok] - lse
    rowmax.reshape(-1)[:rows] = np.where(nan.any(axis=1), F32(np.nan), best)
    ids = np.argsort(-zc, axis=1, kind="stable")[:, :n_top]
    _rows(top_ids, rows, n_top)[...] = ids
    _rows(top_lp, rows, n_top)[...] = np.take_along_axis(z, ids, 1) - lse[:, None]
