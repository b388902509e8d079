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


def round_act(x: np.ndarray) -> np.ndarray:
    """x (T, K) float32, K a multiple of 32 -> d * q per block, float32; a block with NaN or inf gives NaN
    (and one whose max|x| / 127 passes float16's 65504 gets an infinite d, as in llama.cpp)."""
    t, k = x.shape
    b = x.reshape(t, k // QK, QK)
    a = np.abs(b)
    with np.errstate(invalid="ignore", over="ignore"):
        finite = (a <= np.finfo(np.float32).max).all(-1)
        amax = np.where(finite, a.max(-1), np.float32(0))
        d = amax / np.float32(127)
        inv = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax != 0)
        q = np.rint(np.where(finite[..., None], b, np.float32(0)) * inv[..., None])   # ties to even
        d16 = np.where(finite, d.astype(np.float16).astype(np.float32), np.float32(np.nan))
        return (q * d16[..., None]).reshape(t, k).astype(np.float32, copy=False)


QKK = 256


def round_act_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x (T, K) float32, K a multiple of 256 -> (q int8 (T, K), d float32 (T, K // 256)) as llama.cpp's
    quantize_row_q8_K: per block the element of largest |x| (the first) is `max`, iscale = -127 / max,
    q = min(127, rint(iscale * x)) ties to even, d = 1 / iscale; a block of zeros (or one whose max is so
    small that iscale overflows) gives d 0, one with NaN or inf d NaN (both with q 0). Q4_K/Q5_K/Q6_K
    weights multiply these."""
    t, k = x.shape
    b = x.reshape(t, k // QKK, QKK)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        a = np.abs(b)
        finite = (a <= np.finfo(np.float32).max).all(-1)
        mx = np.take_along_axis(b, np.argmax(np.where(finite[..., None], a, 0), -1)[..., None], -1)[..., 0]
        iscale = np.float32(-127) / np.where(finite & (mx != 0), mx, np.float32(0))
        live = np.abs(iscale) <= np.finfo(np.float32).max         # not zero, tiny, NaN or inf
        iscale = np.where(live, iscale, np.float32(0))
        q = np.minimum(np.rint(np.where(live[..., None], b, np.float32(0)) * iscale[..., None]), np.float32(127))
        d = np.where(live, np.float32(1) / np.where(live, iscale, np.float32(1)),
                     np.where(finite, np.float32(0), np.float32(np.nan)))
    return q.astype(np.int8).reshape(t, k), d.astype(np.float32, copy=False)


def round_act_for(kind: str, x: np.ndarray) -> np.ndarray:
    """x as the kernel of weight kind `kind` rounds it, as floats: d * q (Q8_K for the K kinds, else the 32-blocks)."""
    if not kind.endswith("_k"):
        return round_act(x)
    q, d = round_act_k(x)
    t, k = x.shape
    return (q.reshape(t, k // QKK, QKK).astype(np.float32) * d[..., None]).reshape(t, k)
