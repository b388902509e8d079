"""RMSNorm as llama.cpp computes it: x / sqrt(mean(x^2) + eps) * weight."""

from __future__ import annotations

import numpy as np

from kernels.native_lib import load


class NormShapeError(ValueError):
    """Arrays given to add_rms_norm do not fit together (shape, dtype or layout)."""


def rms_norm(xp, x, weight, eps: float):
    """x (T, D), weight (D,) -> (T, D) in x's dtype; the mean of squares is taken in float32."""
    x32 = x.astype(xp.float32, copy=False)
    ms = xp.mean(x32 * x32, axis=-1, keepdims=True)                 # (T, 1)
    inv = 1 / xp.sqrt(ms + xp.float32(eps))                          # float32: eps is a float32 scalar
    return ((x32 * inv).astype(x.dtype, copy=False) * weight).astype(x.dtype, copy=False)


def add_rms_norm(h: np.ndarray, delta: np.ndarray | None, weight: np.ndarray, eps: float,
                 out: np.ndarray | None = None) -> np.ndarray:
    """h += delta (in place, when given), then rms_norm(h) into out (T, D) float32; numpy arrays.

    In C when the native library is built (bit-identical to rms_norm: numpy's pairwise sum order)."""
    t, d = h.shape if h.ndim == 2 else (-1, -1)
    f32 = np.float32
    arrays = [h, weight] + [a for a in (delta, out) if a is not None]
    if (t < 0 or weight.shape != (d,) or any(a.dtype != f32 or not a.flags.c_contiguous for a in arrays)
            or (delta is not None and delta.shape != h.shape) or (out is not None and out.shape != h.shape)
            or not h.flags.writeable or (out is not None and not out.flags.writeable)):
        raise NormShapeError("h (T, D), delta (T, D) or None, weight (D,), out (T, D) or None must be "
                             f"C-contiguous float32; got h {h.dtype} {h.shape}, weight {weight.dtype} "
                             f"{weight.shape}")
    if out is None:
        out = np.empty_like(h)
    lib = load()
    if lib is None:
        if delta is not None:
            h += delta
        out[...] = rms_norm(np, h, weight, eps)
        return out
    rc = lib.lb_rms_norm(h.ctypes.data, None if delta is None else delta.ctypes.data, weight.ctypes.data,
                         t, d, float(eps), out.ctypes.data)
    if rc != 0:
        raise NormShapeError(f"native rms_norm refused h {h.shape} (code {rc})")
    return out
