"""Rotary position embedding in llama.cpp's "normal" mode, the one it uses for LLM_ARCH_LLAMA.

The GGUF converter permutes the rows of q/k weights so that the HF "rotate half" pairs become
adjacent: dims (2i, 2i+1) are rotated together by angle pos * base^(-2i/n_rot). Checked against
llama.cpp's logits (tests/engine/test_parity.py), which the "neox" pairing does not match.
"""

from __future__ import annotations

import numpy as np


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
