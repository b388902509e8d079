"""Activations rounded to 8 bits per block of 32, as llama.cpp rounds them before a quantized dot product.

llama.cpp multiplies a Q4_0/Q4_1/Q8_0 weight by activations quantized to Q8_0/Q8_1: per block of
32, d = max|x| / 127 kept as float16 and q = rint(x * 127 / max|x|). Our quantized weights compute
the same product, so that the default engine follows the arithmetic the reference logits come from
(bench/parity_probe.py measures the difference). This is the numpy definition; the C library
computes it identically (kernels/native/qact.c), which tests check bit for bit.
"""

from __future__ import annotations

import numpy as np

QK = 32


def round_act(x, xp=np):
    """x (T, K) float32 on array module xp, K a multiple of 32 -> d * q per block, float32; a block with
    NaN or inf gives NaN (one whose max|x| / 127 passes float16's 65504 gets an infinite d, as in llama.cpp)."""
    t, k = x.shape
    f32 = xp.float32
    b = x.reshape(t, k // QK, QK)
    a = xp.abs(b)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        finite = (a <= f32(np.finfo(np.float32).max)).all(-1)
        amax = xp.where(finite, a.max(-1), f32(0))
        d = amax / f32(127)
        inv = xp.where(amax != 0, f32(127) / xp.where(amax != 0, amax, f32(1)), f32(0))
        q = xp.rint(xp.where(finite[..., None], b, f32(0)) * inv[..., None])   # ties to even
        d16 = xp.where(finite, d.astype(xp.float16).astype(f32), f32(np.nan))
        return (q * d16[..., None]).reshape(t, k).astype(f32, copy=False)
