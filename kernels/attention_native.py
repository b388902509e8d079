"""Decode attention read straight from the KV pages by the C library (kernels/native/attention.c).

Same contract as kernels.attention.attend_decode, for numpy on a CPU: q (S, H, Dh) float32, a
layer's float16 caches (num_pages, page_size, KVH, Dh), page_table (S, n_pages) int32 and lens (S,)
int32, the keys each sequence has, of which a row sees the last `window` (0: all; a sliding-window
layer). Without the library it is attend_decode over a bias (kernels.attention.window_bias).
"""

from __future__ import annotations

import numpy as np

from kernels.attention import attend_decode, window_bias
from kernels.native_lib import load

ERRORS = {-2: "shapes do not fit", -3: "a page outside the cache", -4: "out of memory"}


def attend_decode_paged(q, k_cache, v_cache, page_table, lens, scale, window: int = 0) -> np.ndarray:
    """One query token per sequence over its pages -> (S, H, Dh) float32."""
    s_, h, dh = q.shape
    num_pages, page, kvh, _ = k_cache.shape
    f32 = np.float32
    q = np.ascontiguousarray(q, dtype=f32)
    table = np.ascontiguousarray(page_table, dtype=np.int32)
    lens = np.ascontiguousarray(lens, dtype=np.int32)
    if (k_cache.dtype != np.float16 or v_cache.dtype != np.float16 or not k_cache.flags.c_contiguous
            or not v_cache.flags.c_contiguous or v_cache.shape != k_cache.shape):
        raise ValueError("k_cache and v_cache must be C-contiguous float16 arrays of one shape")
    if window < 0:
        raise ValueError(f"a sliding window is a count of keys (0: none), got {window}")
    if k_cache.shape[3] != dh or table.ndim != 2 or table.shape[0] != s_ or lens.shape != (s_,):
        raise ValueError(f"q {q.shape}, page_table {table.shape}, lens {lens.shape} do not fit a cache "
                         f"of shape {k_cache.shape}")
    lib = load()
    if lib is None:
        bias = window_bias(lens, table.shape[1] * page, window or table.shape[1] * page, f32)
        return attend_decode(np, q, k_cache, v_cache, table, bias, f32(scale))
    out = np.empty_like(q)
    rc = lib.lb_attend_decode(q.ctypes.data, k_cache.ctypes.data, v_cache.ctypes.data, table.ctypes.data,
                              lens.ctypes.data, s_, h, kvh, dh, page, table.shape[1], num_pages, int(window),
                              float(scale), out.ctypes.data)
    if rc != 0:
        raise ValueError(f"native decode attention: {ERRORS.get(rc, f'error {rc}')}")
    return out
