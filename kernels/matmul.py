"""Projection of activations by a weight stored (out, in): x (T, in) -> (T, out).

Measured on the 2-core Xeon (AVX-512, OpenBLAS 0.3.31 SkylakeX kernels, 1 thread) with the 30
layers' weights streamed from DRAM as in a decode step: `w @ x.T` on (out, in) rows beats
`x @ w` on (in, out) by ~15% at T = 16 and is even at T = 1. At T >= 2 OpenBLAS's packed sgemm
costs ~3x a gemv over the same weight; its unpacked small-matrix kernel, which it takes for
calls of at most 100^3 multiply-adds, does not pack. So `split` cuts w into row blocks under that
size, and hands x.T contiguous (a no-transpose call: the transposed-operand variant is also
limited to 1200 outputs per call and is slow at in = 1536). Gain at T = 4: 2x; at T = 16: 1.2x.

A weight kept in GGUF's quantized blocks (kernels.qmatrix.QMatrix, CPU only) goes to the native
kernel instead (kernels.qmatmul), which reads the blocks themselves.
"""

from __future__ import annotations

from kernels.qmatmul import qmatmul
from kernels.qmatrix import QUANTIZED, QMatrix

SMALL_CALL = 950_000   # multiply-adds per BLAS call: under OpenBLAS's small-matrix limit of 1e6
MIN_BLOCK = 16         # fewer rows per call and the Python loop costs more than it saves


def small_block(t: int, k: int) -> int | None:
    """Rows of w per BLAS call for t activation rows of width k, or None for one call."""
    if t < 2:
        return None                                   # a gemv already streams the weight
    block = SMALL_CALL // (k * t) // 8 * 8
    return block if block >= MIN_BLOCK else None


def matmul(xp, x, w, split: bool = False):
    """x (T, in) . w (out, in) -> (T, out) in x's dtype; split: small-matrix BLAS calls (numpy on CPU)."""
    if isinstance(w, QUANTIZED):
        return qmatmul(x, w)
    n = w.shape[0]
    block = small_block(x.shape[0], x.shape[1]) if split else None
    if block is None or block >= n:
        return (w @ x.T).T
    xt = xp.ascontiguousarray(x.T)                                     # (in, T)
    out = xp.empty((n, x.shape[0]), dtype=x.dtype)
    for a in range(0, n, block):
        xp.matmul(w[a:a + block], xt, out=out[a:a + block])
    return out.T


def embed(xp, table, ids):
    """Rows `ids` of an embedding table (V, D) float or QMatrix -> (T, D), a fresh array."""
    if isinstance(table, QMatrix):
        return table.dequantize(rows=ids)
    return table[xp.asarray(ids)]
