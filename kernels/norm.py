"""RMSNorm as llama.cpp computes it: x / sqrt(mean(x^2) + eps) * weight."""

from __future__ import annotations


def rms_norm(xp, x, weight, eps: float):
    """x (T, D), weight (D,) -> (T, D) in x's dtype; the mean of squares is taken in float32."""
    x32 = x.astype(xp.float32, copy=False)
    ms = xp.mean(x32 * x32, axis=-1, keepdims=True)                 # (T, 1)
    inv = 1 / xp.sqrt(ms + xp.float32(eps))                          # float32: eps is a float32 scalar
    return ((x32 * inv).astype(x.dtype, copy=False) * weight).astype(x.dtype, copy=False)
