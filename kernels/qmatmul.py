"""x (T, K) float32 @ QMatrix (N, K).T -> (T, N) float32, straight from the GGUF blocks.

Computed by the C library (kernels/native_lib.py says how it is loaded); without it the same
product is computed by dequantizing and calling BLAS.
"""

from __future__ import annotations

import threading
from functools import partial

import numpy as np

from kernels.native_lib import load
from kernels.qmatrix import QMatrix

KIND_CODES = {"q4_0": 2, "q4_1": 3, "q8_0": 8}       # ggml's type numbers, as the C side takes them
ISAS = {"auto": -1, "generic": 0, "avx2": 1, "avx512": 2}
# From this many rows of x (a long prompt) the block kernels, which dequantize a block once per
# tile of 8 rows, fall behind OpenBLAS's packed sgemm: dequantize the whole matrix once into a
# scratch buffer (0.3 ns a weight) and let BLAS multiply (bench/qmatmul.py measures the crossing).
BLAS_ROWS = 64
_scratch = threading.local()


def _load():
    return load()            # one seam, so tests can take the library away


def available() -> bool:
    """Whether the native library loaded."""
    return _load() is not None


def set_isa(name: str) -> str:
    """Force the native code path ("auto", "generic", "avx2", "avx512"; for tests); returns the one in use."""
    lib = _load()
    if lib is None:
        raise RuntimeError("the native qmatmul library is not built")
    got = lib.lb_set_isa(ISAS[name])
    return next(k for k, v in ISAS.items() if v == got)


def _check(x: np.ndarray, w: QMatrix, out: np.ndarray | None) -> np.ndarray:
    if not isinstance(w, QMatrix):
        raise ValueError(f"w must be a QMatrix, got {type(w).__name__}")
    if w.kind not in KIND_CODES:
        raise ValueError(f"unknown quant kind {w.kind!r}")
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    if x.ndim != 2 or x.shape[1] != w.cols:
        raise ValueError(f"x has shape {x.shape}, expected (T, {w.cols}) for a weight of shape {w.shape}")
    if out is not None:
        want = (x.shape[0], w.rows)
        if out.dtype != np.float32 or out.shape != want or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError(f"out must be a writeable C-contiguous float32 array of shape {want}")
    return np.ascontiguousarray(x)


def qmatmul(x: np.ndarray, w: QMatrix, out: np.ndarray | None = None) -> np.ndarray:
    """x (T, cols) float32 @ w.dequantize().T -> (T, rows) float32, native when available()."""
    x = _check(x, w, out)
    if out is None:
        out = np.empty((x.shape[0], w.rows), dtype=np.float32)
    lib = _load()
    if lib is None:
        np.matmul(x, w.dequantize().T, out=out)
        return out
    if x.shape[0] >= BLAS_ROWS:
        np.matmul(x, _dequantized(lib, w).T, out=out)
        return out
    rc = lib.lb_qmatmul(KIND_CODES[w.kind], x.ctypes.data, x.shape[0], x.shape[1], w.address, w.rows,
                        out.ctypes.data)
    if rc != 0:
        raise ValueError(f"native qmatmul refused kind {w.kind} x {x.shape} w {w.shape} (code {rc})")
    return out


def bound_qmatmul(x: np.ndarray, w: QMatrix, out: np.ndarray):
    """qmatmul(x, w, out) as a call without arguments, for buffers reused every step: their checks and
    addresses (ctypes' .ctypes.data costs ~1 us) are done once. Only valid while x and out live."""
    _check(x, w, out)
    lib = _load()
    if lib is None or x.shape[0] >= BLAS_ROWS or not x.flags.c_contiguous:
        return partial(qmatmul, x, w, out)
    fn, args = lib.lb_qmatmul, (KIND_CODES[w.kind], x.ctypes.data, x.shape[0], x.shape[1], w.address, w.rows,
                                out.ctypes.data)

    def call():
        rc = fn(*args)
        if rc != 0:
            raise ValueError(f"native qmatmul refused kind {w.kind} x {x.shape} w {w.shape} (code {rc})")
        return out
    return call


def _dequantized(lib, w: QMatrix) -> np.ndarray:
    """w as float32 (rows, cols) in this thread's scratch buffer (reused: no page faults per call)."""
    n = w.rows * w.cols
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < n:
        buf = _scratch.buf = np.empty(n, dtype=np.float32)
    wf = buf[:n].reshape(w.rows, w.cols)
    rc = lib.lb_dequantize(KIND_CODES[w.kind], w.address, w.rows, w.cols, wf.ctypes.data)
    if rc != 0:
        raise ValueError(f"native dequantize refused kind {w.kind} w {w.shape} (code {rc})")
    return wf
