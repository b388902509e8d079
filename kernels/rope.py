"""Rotary position embedding in llama.cpp's "normal" mode, the one it uses for LLM_ARCH_LLAMA.

The GGUF converter permutes the rows of q/k weights so that the HF "rotate half" pairs become
adjacent: dims (2i, 2i+1) are rotated together by angle pos * base^(-2i/n_rot). Checked against
llama.cpp's logits (tests/engine/test_parity.py), which the "neox" pairing does not match.
Architectures whose files keep the "neox" pairing (qwen, gemma, phi3) have their q/k rows put
into this pairing when loaded (services/modelstore/rope_layout.py), so this is the only mode.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from kernels.attention import write_kv
from kernels.native_lib import load


@dataclass(frozen=True)
class RopeScaling:
    """How a model stretches RoPE past its training context, as llama.cpp's ggml_rope_ext takes it.

    freq_scale: 1/factor of linear and YaRN scaling (angles are multiplied by it);
    freq_factors: per rotated pair, the angle's divisor (Llama 3's `rope_freqs` tensor);
    yarn_orig_ctx > 0 turns YaRN on: dims rotating fast keep their angle (extrapolate), slow ones
    take the scaled one, ramped between the correction dims of beta_fast and beta_slow, and
    cos/sin are scaled by 1 + 0.1 ln(factor); attn_factor scales cos/sin in any case."""

    freq_scale: float = 1.0
    attn_factor: float = 1.0
    freq_factors: tuple[float, ...] | None = None
    yarn_orig_ctx: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0


NO_SCALING = RopeScaling()


def _yarn_ramp(n_rot: int, base: float, s: RopeScaling) -> np.ndarray:
    """(n_rot/2,) weight of the unscaled angle per pair: 1 for fast dims, 0 for slow ones."""
    def corr_dim(n_rotations: float) -> float:
        return n_rot * np.log(s.yarn_orig_ctx / (n_rotations * 2 * np.pi)) / (2 * np.log(base))
    low = max(0.0, np.floor(corr_dim(s.beta_fast)))
    high = min(n_rot - 1.0, np.ceil(corr_dim(s.beta_slow)))
    y = (np.arange(n_rot // 2, dtype=np.float64) - low) / max(0.001, high - low)
    return 1 - np.clip(y, 0, 1)


def rope_tables(xp, positions, n_rot: int, base: float, dtype, scaling: RopeScaling = NO_SCALING):
    """cos, sin (T, n_rot/2) in `dtype` for int positions (T,).

    Angles are formed in float64 on purpose (pos * freq loses ~1e-3 rad in float32 at long
    positions), then cast once; the tables are tiny.
    """
    scaled, mscale = _frequencies(n_rot, float(base), scaling)
    pos = xp.asarray(positions).astype(xp.float64)
    angles = pos[:, None] * xp.asarray(scaled)[None, :]                       # (T, n_rot/2)
    if mscale == 1.0:
        return xp.cos(angles).astype(dtype), xp.sin(angles).astype(dtype)
    return (xp.cos(angles) * mscale).astype(dtype), (xp.sin(angles) * mscale).astype(dtype)


def frequencies(n_rot: int, base: float, scaling: RopeScaling = NO_SCALING) -> tuple[np.ndarray, float]:
    """Each rotated pair's angle per position (n_rot/2,) float64 and the scale of cos/sin: what
    rope_tables forms its tables from (a GPU forms them in its kernel from these)."""
    return _frequencies(n_rot, float(base), scaling)


@functools.lru_cache(maxsize=64)
def _frequencies(n_rot: int, base: float, scaling: RopeScaling) -> tuple[np.ndarray, float]:
    """Each rotated pair's angle per position (float64, read-only) and the cos/sin scale: the same
    every step, so formed once (a decode step spent ~10 us of numpy calls on them)."""
    inv_freq = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)   # (n_rot/2,)
    if scaling.freq_factors is not None:
        inv_freq = inv_freq / np.asarray(scaling.freq_factors, dtype=np.float64)
    scaled = inv_freq * scaling.freq_scale
    mscale = scaling.attn_factor
    if scaling.yarn_orig_ctx:
        mix = _yarn_ramp(n_rot, base, scaling)
        scaled = scaled * (1 - mix) + inv_freq * mix
        mscale *= 1.0 + 0.1 * np.log(1.0 / scaling.freq_scale)
    scaled.flags.writeable = False
    return scaled, mscale


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
    layer's float16 caches (num_pages, page, KVH, Dh); return rotated q (T, H, Dh) (into q_out when
    given).

    In C when the native library is built (bit-identical to apply_rope and write_kv, numpy's
    rounding to float16 included)."""
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
            or any(a.dtype != f32 for a in (qkv, cos, sin, q_out))
            or k_cache.dtype != np.float16 or v_cache.dtype != np.float16
            or not all(a.flags.c_contiguous for a in (qkv, cos, sin, k_cache, v_cache, q_out))
            or not (k_cache.flags.writeable and v_cache.flags.writeable and q_out.flags.writeable)):
        raise RopeShapeError(f"qkv {qkv.dtype} {qkv.shape}, cos/sin {cos.shape}, caches {k_cache.shape}, "
                             f"pages {pages.shape}, q_out {q_out.shape} do not fit {n_heads} heads and "
                             f"{n_kv_heads} KV heads (all C-contiguous, float32 but the float16 caches)")
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
    if rc == -4:
        raise MemoryError("native rope_write_kv: out of memory")
    if rc != 0:
        raise RopeShapeError(f"native rope_write_kv refused qkv {qkv.shape} (code {rc})")
    return q_out
