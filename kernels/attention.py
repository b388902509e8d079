"""Causal attention with grouped KV heads over a paged KV cache.

A layer's cache is two arrays (num_pages, page_size, n_kv_heads, head_dim), float16 as llama.cpp's
(a write rounds to it, a read widens exactly to the queries' type). The queries are rounded to
float16 too before the scores, as llama.cpp's flash attention (its default) takes q to the keys'
type; products and sums stay in the queries' type. A sequence's keys
live in the pages its page table lists, position p at page_table[p // page_size], slot
p % page_size. Query head h reads KV head h // (n_heads / n_kv_heads), as llama.cpp does.
"""

from __future__ import annotations

import numpy as np

from kernels.softmax import softmax


def as_keys(xp, q):
    """q rounded to float16, as the keys are, in its own type."""
    return q.astype(xp.float16).astype(q.dtype)


def write_kv(k_cache, v_cache, k, v, pages, slots):
    """Store k, v (T, KVH, Dh) of T tokens at (pages[t], slots[t]) of one layer's cache."""
    k_cache[pages, slots] = k
    v_cache[pages, slots] = v


def attend_decode(xp, q, k_cache, v_cache, page_table, bias, scale):
    """One query token per sequence, all sequences at once.

    q (S, H, Dh); page_table (S, n_pages) with no -1 (padding points at any real page);
    bias (S, n_pages * page_size) is 0 where a key exists and -inf past the context.
    Returns (S, H, Dh).
    """
    s_, h, dh = q.shape
    kvh = k_cache.shape[2]
    ctx = bias.shape[1]
    k = k_cache[page_table].reshape(s_, ctx, kvh, dh).astype(q.dtype)     # (S, C, KVH, Dh)
    v = v_cache[page_table].reshape(s_, ctx, kvh, dh).astype(q.dtype)
    qg = as_keys(xp, q).reshape(s_, kvh, h // kvh, dh)                    # (S, KVH, G, Dh)
    scores = qg @ k.transpose(0, 2, 3, 1)                                 # (S, KVH, G, C)
    scores *= scale
    scores += bias[:, None, None, :]
    p = softmax(xp, scores)
    out = p @ v.transpose(0, 2, 1, 3)                                     # (S, KVH, G, Dh)
    return out.reshape(s_, h, dh)


def window_bias(lens, n_keys: int, window: int, dtype):
    """(S, n_keys) numpy bias of decode rows seeing `lens` keys through a sliding window: 0 for the
    last `window` keys of each row (itself included, as llama.cpp's is_masked_swa), -inf elsewhere."""
    keys = np.arange(n_keys)[None, :]
    lens = np.asarray(lens, dtype=np.int64)[:, None]
    seen = (keys < lens) & (keys >= lens - window)
    return np.where(seen, 0.0, -np.inf).astype(dtype)


def attend_prefill(xp, q, k_cache, v_cache, pages, start: int, scale, window: int = 0):
    """Queries of one sequence at positions start .. start+n-1, each seeing keys up to itself
    (and, with a sliding `window`, only the last `window` of them).

    q (n, H, Dh); pages (n_pages,) of the sequence, covering start + n positions.
    Returns (n, H, Dh).
    """
    n, h, dh = q.shape
    kvh = k_cache.shape[2]
    g = h // kvh
    ctx = start + n
    k = k_cache[pages].reshape(-1, kvh, dh)[:ctx].astype(q.dtype)         # (C, KVH, Dh)
    v = v_cache[pages].reshape(-1, kvh, dh)[:ctx].astype(q.dtype)
    qg = as_keys(xp, q).reshape(n, kvh, g, dh).transpose(1, 2, 0, 3)      # (KVH, G, n, Dh)
    scores = qg @ k.transpose(1, 2, 0)[:, None]                           # (KVH, G, n, C)
    scores *= scale
    # Query i sits at position start + i and may see keys 0 .. start + i.
    future = xp.arange(ctx)[None, :] > (start + xp.arange(n))[:, None]    # (n, C)
    if window:
        future |= xp.arange(ctx)[None, :] <= (start + xp.arange(n))[:, None] - window
    scores[:, :, future] = -xp.inf
    p = softmax(xp, scores)
    out = p @ v.transpose(1, 0, 2)[:, None]                               # (KVH, G, n, Dh)
    return out.transpose(2, 0, 1, 3).reshape(n, h, dh)
