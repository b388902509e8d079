"""Rotary position embedding in llama.cpp's "normal" mode, the one it uses for LLM_ARCH_LLAMA.

The GGUF converter permutes the rows of q/k weights so that the HF "rotate half" pairs become
adjacent: dims (2i, 2i+1) are rotated together by angle pos * base^(-2i/n_rot). Checked against
llama.cpp's logits (tests/engine/test_parity.py), which the "neox" pairing does not match.
"""

from __future__ import annotations

import numpy as np

from kernels.attention import write_kv
from kernels.native_lib import load


def rope_tables(xp, positions, n_rot: int, base: float, dtype):
    """cos, sin (T, n_rot/2) in `dtype` for int positions (T,).

    Angles are formed in float64 on purpose (pos * freq loses ~1e-3 rad in float32 at long
    positions), then cast once; the tables are tiny.
    """
    inv_freq = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)   # (n_rot/2,)
    pos = xp.asarray(positions).astype(xp.float64)
    angles = pos[:, None] * xp.asarray(inv_freq)[None, :]                     # (T, n_rot/2)
    return xp.cos(angles).astype(dtype), xp.sin(angles).astype(dtype)


def apply_rope(xp, x, cos, sin):
    """x (T, H, head_dim) -> rotated copy; only the first 2*cos.shape[1] dims are rotated."""
    t, h, d = x.shape
    n_rot = 2 * cos.shape[1]
    pairs = x[:, :, :n_rot].reshape(t, h, n_rot // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]                                     # (T, H, n_rot/2)
    c, s = cos[:, None, :], sin[:, None, :]
    out = xp.empty_like(x)
    rot = out.reshape(t, h, d // 2, 2)[:, :, : n_rot // 2]                    # a view into out
    rot[..., 0] = x0 * c - x1 * s
    rot[..., 1] = x0 * s + x1 * c
    if n_rot < d:
        out[:, :, n_rot:] = x[:, :, n_rot:]
    return out


class RopeShapeError(ValueError):
    """Arrays given to rope_write_kv do not fit together (shape, dtype, layout or a slot outside the cache)."""


def rope_write_kv(qkv, n_heads: int, n_kv_heads: int, cos, sin, k_cache, v_cache, pages, slots, q_out=None):
    """Split qkv (T, (H + 2 KVH) * Dh) float32; store rotated k and v at (pages[t], slots[t]) of one
    layer's caches (num_pages, page, KVH, Dh); return rotated q (T, H, Dh) (into q_out when given).

    In C when the native library is built (bit-identical to apply_rope and write_kv)."""
    f32 = np.float32
    num_pages, page, kvh, dh = k_cache.shape if k_cache.ndim == 4 else (0, 0, -1, 0)
    t = qkv.shape[0] if qkv.ndim == 2 else -1
    half = cos.shape[1] if cos.ndim == 2 else -1
    pages = np.ascontiguousarray(pages, dtype=np.int64)
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    if q_out is None:
        q_out = np.empty((max(t, 0), n_heads, max(dh, 0)), dtype=f32)
    if (t < 0 or kvh != n_kv_heads or qkv.shape[1] != (n_heads + 2 * kvh) * dh or half < 0
            or 2 * half > dh or cos.shape != (t, half) or sin.shape != (t, half)
            or v_cache.shape != k_cache.shape or pages.shape != (t,) or slots.shape != (t,)
            or q_out.shape != (t, n_heads, dh)
            or any(a.dtype != f32 or not a.flags.c_contiguous for a in (qkv, cos, sin, k_cache, v_cache, q_out))
            or not (k_cache.flags.writeable and v_cache.flags.writeable and q_out.flags.writeable)):
        raise RopeShapeError(f"qkv {qkv.dtype} {qkv.shape}, cos/sin {cos.shape}, caches {k_cache.shape}, "
                             f"pages {pages.shape}, q_out {q_out.shape} do not fit {n_heads} heads and "
                             f"{n_kv_heads} KV heads (all C-contiguous float32)")
    if np.any((pages < 0) | (pages >= num_pages) | (slots < 0) | (slots >= page)):
        raise RopeShapeError(f"a KV slot outside the cache ({num_pages} pages of {page})")
    lib = load()
    if lib is None:
        nq, nkv = n_heads * dh, kvh * dh
        q_out[...] = apply_rope(np, qkv[:, :nq].reshape(t, n_heads, dh), cos, sin)
        k = apply_rope(np, qkv[:, nq:nq + nkv].reshape(t, kvh, dh), cos, sin)
        write_kv(k_cache, v_cache, k, qkv[:, nq + nkv:].reshape(t, kvh, dh), pages, slots)
        return q_out
    rc = lib.lb_rope_write_kv(qkv.ctypes.data, t, n_heads, kvh, dh, 2 * half, cos.ctypes.data, sin.ctypes.data,
                              pages.ctypes.data, slots.ctypes.data, k_cache.ctypes.data, v_cache.ctypes.data,
                              num_pages, page, q_out.ctypes.data)
    if rc != 0:
        raise RopeShapeError(f"native rope_write_kv refused qkv {qkv.shape} (code {rc})")
    return q_out
