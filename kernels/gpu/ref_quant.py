"""GGUF blocks read unit by unit, as kernels/gpu/cuda/quant.cuh reads them: the numpy reference of
the device's quantized kernels (qmatmul_*, dequant_*, embed_*).

A unit is 32 consecutive weights of a row; unit u of a row starts at weight 32u. The byte offsets
and float steps here are the CUDA code's, written out over every unit at once, so a test that
holds this to the CPU's own dequantization (kernels.qmatrix, the gguf package) also checks the
indexing the kernels use; the GPU tests then hold the kernels to this.
"""

from __future__ import annotations

import weakref

import numpy as np

F32 = np.float32
# kind -> (weights a block, bytes a block); "f16" is a plain float16 row in blocks of 32 (64 bytes).
BLOCKS = {"q4_0": (32, 18), "q4_1": (32, 20), "q8_0": (32, 34), "q4_k": (256, 144), "q5_k": (256, 176),
          "q6_k": (256, 210), "f16": (32, 64)}
KINDS = tuple(BLOCKS)


class BadDeviceMatrix(ValueError):
    """Bytes, kind or width that do not describe a device weight matrix."""


def row_bytes(kind: str, k: int) -> int:
    """Bytes of one row of k weights in `kind`."""
    if kind not in BLOCKS:
        raise BadDeviceMatrix(f"no device kernel for weight kind {kind!r} (have {', '.join(KINDS)})")
    per, nbytes = BLOCKS[kind]
    if k <= 0 or k % per:
        raise BadDeviceMatrix(f"rows of {k} weights are not whole {kind} blocks of {per}")
    return k // per * nbytes


def _half(b: np.ndarray, at: int) -> np.ndarray:
    """The little-endian float16 at byte `at` of each block (N, nb, bytes) -> (N, nb, 1, 1) float32."""
    return np.ascontiguousarray(b[..., at:at + 2]).view(np.float16).astype(F32)[..., None]


def _scale_min_k4(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's get_scale_min_k4 for sub-blocks j = 0..7 of the 12 scale bytes sc (N, nb, 12) ->
    (N, nb, 8, 1) float32 scale and min: j < 4 the low 6 bits of q[j], q[j + 4]; else the nibbles of
    q[j + 4] topped by the high 2 bits of q[j - 4] and q[j]."""
    q = sc.astype(np.int32)
    lo, mid, hi = q[..., 0:4], q[..., 4:8], q[..., 8:12]           # q[j], q[j + 4], q[j + 8] for j < 4
    s = np.concatenate([lo & 63, (hi & 0xF) | ((lo >> 6) << 4)], axis=-1)
    m = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=-1)
    return s.astype(F32)[..., None], m.astype(F32)[..., None]


def _units(data: np.ndarray, kind: str, k: int) -> np.ndarray:
    """(N, row bytes) uint8 -> (N, blocks, units a block, 32) float32: every unit of every row, its
    lanes l = 0..31 read from the bytes quant.cuh reads them from."""
    per, nbytes = BLOCKS[kind]
    b = data.reshape(data.shape[0], k // per, nbytes)                      # (N, nb, bytes)
    if kind == "f16":
        return np.ascontiguousarray(b).view(np.float16).astype(F32)[:, :, None, :]
    if kind == "q8_0":
        return _half(b, 0) * b[:, :, None, 2:34].view(np.int8).astype(F32)
    if kind in ("q4_0", "q4_1"):
        qs = b[:, :, None, (4 if kind == "q4_1" else 2):][..., :16]        # lane l in byte l % 16
        nib = np.concatenate([qs & 0xF, qs >> 4], axis=-1)                 # low nibbles lanes 0-15
        if kind == "q4_0":
            return _half(b, 0) * (nib.astype(np.int32) - 8).astype(F32)
        return _half(b, 0) * nib.astype(F32) + _half(b, 2)
    if kind == "q6_k":
        ql, qh = b[..., 0:128].reshape(*b.shape[:2], 2, 2, 32), b[..., 128:192].reshape(*b.shape[:2], 2, 32)
        # unit j = 4 half + quarter: ql at 64 half + 32 (quarter & 1), low nibble for quarters 0, 1;
        # qh at 32 half, shifted by 2 quarter.
        low = np.stack([ql[:, :, :, 0] & 0xF, ql[:, :, :, 1] & 0xF, ql[:, :, :, 0] >> 4, ql[:, :, :, 1] >> 4], axis=3)
        high = np.stack([(qh >> s) & 3 for s in (0, 2, 4, 6)], axis=3)
        q = (low.astype(np.int32) | (high.astype(np.int32) << 4)).reshape(*b.shape[:2], 8, 32) - 32
        sc = b[..., 192:208].view(np.int8).astype(F32).reshape(*b.shape[:2], 8, 2)   # scale 2j + l // 16
        d = _half(b, 208) * np.repeat(sc, 16, axis=-1)
        return d * q.astype(F32)
    s, m = _scale_min_k4(b[..., 4:16])
    d1, m1 = _half(b, 0) * s, _half(b, 2) * m
    qs = b[..., (16 if kind == "q4_k" else 48):].reshape(*b.shape[:2], 4, 1, 32)   # sub-block j: 32 (j >> 1)
    q = np.concatenate([qs & 0xF, qs >> 4], axis=3).reshape(*b.shape[:2], 8, 32).astype(np.int32)  # shift 4 (j & 1)
    if kind == "q5_k":
        qh = b[:, :, None, 16:48].astype(np.int32)                          # bit j of qh[l]
        q = q | (((qh >> np.arange(8)[:, None]) & 1) << 4)
    return d1 * q.astype(F32) - m1


def dequant_rows(kind: str, data: np.ndarray, k: int) -> np.ndarray:
    """(N, row bytes) uint8 blocks of `kind` -> (N, k) float32."""
    rb = row_bytes(kind, k)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != rb:
        raise BadDeviceMatrix(f"{kind} rows of {k} weights are ({rb},) uint8, got {data.dtype} {data.shape}")
    with np.errstate(over="ignore", invalid="ignore"):        # random test bytes may hold inf/NaN scales
        return _units(data, kind, k).reshape(data.shape[0], k)


def _flat(a: np.ndarray, n: int) -> np.ndarray:
    """The first n elements of a contiguous buffer, as a view (writes land in the buffer)."""
    return a.reshape(-1)[:n]


def root_array(a: np.ndarray) -> np.ndarray:
    """The array that owns a's memory (a itself, or the last ndarray of its chain of bases)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


# Rows dequantized from read-only buffers (weights: NumpyDevice.constant), kept while the buffer lives,
# by address and dtype: a view of the same rows made again (a recorded graph's replay) finds them.
# qmatmul keeps them in float64, the dtype it sums in (exact: float32 values widened), so that a
# replay does not widen every weight of the model again for each token.
_KEPT: dict[tuple, tuple[weakref.ref, np.ndarray]] = {}


def _weight(kind: str, w: np.ndarray, n_rows: int, k: int, dtype=F32) -> np.ndarray:
    """W (n_rows, k) of the blocks at w, float32 values in `dtype`; derived once for a buffer nothing
    can write."""
    rb = row_bytes(kind, k)
    rows = _flat(w, n_rows * rb).reshape(n_rows, rb)
    if w.flags.writeable:
        return dequant_rows(kind, rows, k).astype(dtype, copy=False)
    root = root_array(w)
    key = (w.__array_interface__["data"][0], kind, n_rows, k, np.dtype(dtype).str)
    kept = _KEPT.get(key)
    if kept is not None and kept[0]() is root:
        return kept[1]
    out = dequant_rows(kind, rows, k).astype(dtype, copy=False)
    _KEPT[key] = (weakref.ref(root, lambda _, key=key: _KEPT.pop(key, None)), out)
    return out


def qmatmul(kind: str, w, n_rows, k, x, ldx, t_rows, out, ldo, col0) -> None:
    """out[t, col0 + n] = sum_k x[t, k] * W[n, k] over t < t_rows, n < n_rows."""
    wm = _weight(kind, w, n_rows, k, np.float64)
    xm = _flat(x, t_rows * ldx).reshape(t_rows, ldx)[:, :k]
    om = _flat(out, t_rows * ldo).reshape(t_rows, ldo)
    # In float64, rounded once: a float32 BLAS sums a row in an order that depends on how many rows
    # come with it, and a float16 KV cache turns that last bit into a different key now and then.
    om[:, col0:col0 + n_rows] = (xm.astype(np.float64) @ wm.T).astype(F32)


def qmatvec(kind: str, w, n_rows, k, x, out, ldo, col0) -> None:
    """out[col0 + n] = sum_k x[k] * W[n, k]: qmatmul of one activation row."""
    qmatmul(kind, w, n_rows, k, x, k, 1, out, ldo, col0)


def dequant(kind: str, w, n_rows, k, out) -> None:
    """out (n_rows, k) = W as float32."""
    _flat(out, n_rows * k)[:] = _weight(kind, w, n_rows, k).reshape(-1)


def embed(kind: str, w, k, ids, t_rows, scale, out) -> None:
    """out (t_rows, k) = rows ids[:t_rows] of W, times scale."""
    rb = row_bytes(kind, k)
    rows = w.reshape(-1, rb)[ids.reshape(-1)[:t_rows]]
    _flat(out, t_rows * k)[:] = (dequant_rows(kind, rows, k) * F32(scale)).reshape(-1)
