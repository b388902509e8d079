"""x (T, K) float32 @ QMatrix (N, K).T -> (T, N) float32, straight from the GGUF blocks.

As llama.cpp does, x is first rounded to 8 bits per block of 32 (kernels.qact.round_act); the C
library (kernels/native_lib.py says how it is loaded) then sums the quant products exactly in
integers, for any number of rows: each row's sum is the same whatever the batch around it, which
8-bit rounding needs (a 1-ulp difference flips a rounding, and it grows over the layers into a
different token). Without the library, the same product is computed in float32 by BLAS over the
rounded x and the dequantized weight: equal up to float32 summation order, not batch-invariant.
"""

from __future__ import annotations

import numpy as np

from kernels.native_lib import ISAS, load
from kernels.qact import QKK, round_act, round_act_for
from kernels.qmatrix import QUANTIZED, QMatrix, QRows

KIND_CODES = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
              "q4_k": 12, "q5_k": 13, "q6_k": 14,    # ggml's type numbers, as the C side takes them
              "q4_0_t16": 1002}                      # ours: Q4_0 in tiles (kernels.q4_0_tiles)


def _load():
    return load()            # one seam, so tests can take the library away


def available() -> bool:
    """Whether the native library loaded."""
    return _load() is not None


def library():
    """The native library (ctypes), or None: through the seam tests take it away by."""
    return _load()


def set_isa(name: str) -> str:
    """Force the native code path ("auto", "generic", "avx2", "avx512"; for tests); returns the one in use."""
    lib = _load()
    if lib is None:
        raise RuntimeError("the native qmatmul library is not built")
    got = lib.lb_set_isa(ISAS[name])
    return next(k for k, v in ISAS.items() if v == got)


def _check(x: np.ndarray, w: QMatrix | QRows, out: np.ndarray | None) -> np.ndarray:
    if not isinstance(w, QUANTIZED):
        raise ValueError(f"w must be a QMatrix or QRows, got {type(w).__name__}")
    if isinstance(w, QMatrix) and w.kind not in KIND_CODES:
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
    """round_act(x) (T, cols) float32 @ w.dequantize().T -> (T, rows) float32, native when available()."""
    x = _check(x, w, out)
    if out is None:
        out = np.empty((x.shape[0], w.rows), dtype=np.float32)
    if isinstance(w, QRows):
        a = 0
        for p in w.parts:                                  # each part in its own blocks, into its columns
            out[:, a:a + p.rows] = qmatmul(x, p)
            a += p.rows
        return out
    lib = _load()
    if lib is None:
        np.matmul(round_act_for(w.kind, x), w.dequantize().T, out=out)
        return out
    rc = lib.lb_qmatmul(KIND_CODES[w.kind], x.ctypes.data, x.shape[0], x.shape[1], w.address, w.rows,
                        out.ctypes.data)
    if rc == -3:
        raise MemoryError(f"native qmatmul could not allocate the rounded activations of x {x.shape}")
    if rc != 0:
        raise ValueError(f"native qmatmul refused kind {w.kind} x {x.shape} w {w.shape} (code {rc})")
    return out


def qmatmul_args(x: np.ndarray, w: QMatrix, out: np.ndarray) -> tuple[int, ...]:
    """lb_qmatmul's arguments for x . w -> out, checked (x C-contiguous): for calls made again and again
    on buffers that stay alive while the calls do."""
    _check(x, w, out)
    if not isinstance(w, QMatrix) or not x.flags.c_contiguous:
        raise ValueError("lb_qmatmul takes a QMatrix and a C-contiguous x")
    return KIND_CODES[w.kind], x.ctypes.data, x.shape[0], x.shape[1], w.address, w.rows, out.ctypes.data


def rounded_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """kernels.qact.round_act_k(x) (q, d) by the C library (what the K kinds multiply); numpy without it."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    lib = _load()
    if lib is None:
        from kernels.qact import round_act_k
        return round_act_k(x)
    q = np.empty(x.shape, np.int8)
    d = np.empty((x.shape[0], x.shape[1] // QKK), np.float32)
    rc = lib.lb_round_act_k(x.ctypes.data, x.shape[0], x.shape[1], q.ctypes.data, d.ctypes.data)
    if rc != 0:
        raise ValueError(f"native round_act_k refused x {x.shape} (code {rc})")
    return q, d


def rounded(x: np.ndarray) -> np.ndarray:
    """round_act(x) by the C library when built (bit-identical to the numpy definition, faster)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    lib = _load()
    if lib is None:
        return round_act(x)
    out = np.empty_like(x)
    rc = lib.lb_round_act(x.ctypes.data, x.shape[0], x.shape[1], out.ctypes.data)
    if rc != 0:
        raise ValueError(f"native round_act refused x {x.shape} (code {rc})")
    return out
