"""Projection of activations by a weight stored (out, in): x (T, in) -> (T, out).

Measured on the 2-core Xeon (AVX-512, OpenBLAS 0.3.31, 1 thread) with the 30 layers' weights
streamed from DRAM as in a decode step: `w @ x.T` on (out, in) rows beats `x @ w` on (in, out)
by ~15% at T = 16 and is even at T = 1. For 2 <= T <= 12 OpenBLAS's packed sgemm costs ~3x a
gemv, but a call of at most ~800k multiply-adds (rows * in * T) takes its unpacked small-matrix
path: cutting w into row blocks under that size halves the time (at 800k some shapes already
fall back, hence the margin). The result is the (T, out) transpose of a C-contiguous (out, T)
product (an F-order view).
"""

from __future__ import annotations

SMALL_CALL = 600_000   # multiply-adds per BLAS call kept under OpenBLAS's small-matrix limit, with margin
MIN_BLOCK = 32         # below this many rows per call the Python loop costs more than it saves


def small_block(t: int, k: int) -> int | None:
    """Rows of w per BLAS call for t activation rows of width k, or None for one call."""
    if t < 2:
        return None                                   # a gemv already streams the weight
    block = SMALL_CALL // (k * t) // 16 * 16
    return block if block >= MIN_BLOCK else None


def matmul(xp, x, w, split: bool = False):
    """x (T, in) . w (out, in) -> (T, out) in x's dtype; split: small-matrix BLAS calls (numpy on CPU)."""
    n = w.shape[0]
    xt = x.T
    block = small_block(x.shape[0], x.shape[1]) if split else None
    if block is None or block >= n:
        return (w @ xt).T
    out = xp.empty((n, x.shape[0]), dtype=x.dtype)
    for a in range(0, n, block):
        xp.matmul(w[a:a + block], xt, out=out[a:a + block])
    return out.T
