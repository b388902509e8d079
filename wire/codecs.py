"""Tensor codecs: how an array becomes payload frames and back.

    raw   any numeric dtype, bit-exact (token ids, page tables, positions)
    fp32  float32 activations, bit-exact
    fp16  float32 activations as IEEE half: finite values past ±65504 saturate, inf/NaN kept
    int8  float32 activations, symmetric, one float32 scale per row or per block of a row;
          `auto` picks per-row unless its measured error is past INT8_ROW_MAX_ERR.
          Non-finite values cannot be carried and raise ValueError on encode.

A codec validates a received descriptor against the actual payload sizes before touching the
bytes, so a header that claims 2^32 elements allocates nothing.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .dtypes import dtype_name

RAW_DTYPES = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                        "int64", "uint64", "float16", "float32", "float64"})
# Measured on synthetic hidden states, 256 rows of 576 (tests/wire/activations.py; relative L2
# error, bytes a value):
#                               per-row        block 16       block 32       block 64
#   gaussian, no outliers       1.3% (1.007)   0.57% (1.25)   0.69% (1.125)  0.82% (1.06)
#   6 outlier channels to 300   2.7-3.4%       0.76-0.82%     0.95-1.0%      1.35-1.4%
# Blocks of 32 (as llama.cpp's Q8_0) hold ~1% with outliers for 12% more bytes than per-row;
# per-row is kept only where it is already within 1%, i.e. rows without outlier channels.
INT8_BLOCK = 32
INT8_ROW_MAX_ERR = 0.01  # relative L2 error of per-row scales above which blocks are used
FP16_MAX = np.float32(65504.0)
MAX_INT8_BLOCK = 1 << 20
TINY = np.finfo(np.float32).tiny  # smallest normal float32: the least int8 scale


class Codec:
    name = ""

    def encode(self, x: np.ndarray) -> tuple[dict, list[np.ndarray]]:
        raise NotImplementedError

    def sizes(self, meta: dict, dtype: str, shape: tuple[int, ...]) -> list[int]:
        """Byte size of each payload buffer; raises ValueError if meta or dtype is not valid."""
        raise NotImplementedError

    def decode(self, meta: dict, dtype: str, shape: tuple[int, ...],
               bufs: Sequence[memoryview]) -> np.ndarray:
        raise NotImplementedError


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _rows(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, row length): the last axis is a row; a 0-d tensor is one row of one."""
    if not shape:
        return 1, 1
    return _numel(shape[:-1]), shape[-1]


def _view(buf: memoryview, dtype, shape) -> np.ndarray:
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


class Raw(Codec):
    name = "raw"

    def encode(self, x):
        if dtype_name(x.dtype) not in RAW_DTYPES:
            raise ValueError(f"raw codec cannot carry dtype {x.dtype}")
        return {}, [np.ascontiguousarray(x)]

    def sizes(self, meta, dtype, shape):
        if dtype not in RAW_DTYPES or meta:
            raise ValueError(f"raw codec: bad dtype {dtype!r} or meta")
        return [_numel(shape) * np.dtype(dtype).itemsize]

    def decode(self, meta, dtype, shape, bufs):
        return _view(bufs[0], np.dtype(dtype), shape)


class _Float32Codec(Codec):
    def _check(self, x):
        if x.dtype != np.float32:
            raise ValueError(f"{self.name} codec takes float32 activations, got {x.dtype}")

    def _check_meta(self, meta, dtype):
        if dtype != "float32":
            raise ValueError(f"{self.name} codec decodes to float32, not {dtype!r}")


class Fp32(_Float32Codec):
    name = "fp32"

    def encode(self, x):
        self._check(x)
        return {}, [np.ascontiguousarray(x)]

    def sizes(self, meta, dtype, shape):
        self._check_meta(meta, dtype)
        if meta:
            raise ValueError("fp32 codec has no meta")
        return [_numel(shape) * 4]

    def decode(self, meta, dtype, shape, bufs):
        return _view(bufs[0], np.float32, shape)


class Fp16(_Float32Codec):
    name = "fp16"

    def encode(self, x):
        self._check(x)
        x = np.ascontiguousarray(x)
        with np.errstate(over="ignore"):
            h = x.astype(np.float16)
        # Saturate finite values past the half range instead of letting them become inf. A
        # max/min of the input (fast) rules that out in the common case; NaN fails it too.
        if x.size and not (-FP16_MAX <= x.min() and x.max() <= FP16_MAX):
            over = np.isinf(h) & np.isfinite(x)
            h[over] = np.copysign(FP16_MAX, x[over]).astype(np.float16)
        return {}, [h]

    def sizes(self, meta, dtype, shape):
        self._check_meta(meta, dtype)
        if meta:
            raise ValueError("fp16 codec has no meta")
        return [_numel(shape) * 2]

    def decode(self, meta, dtype, shape, bufs):
        return _view(bufs[0], np.float16, shape).astype(np.float32)


class Int8(_Float32Codec):
    """Symmetric int8; meta {"block": B}: B == 0 is one scale per row, else per B values."""

    name = "int8"

    def __init__(self, block: int | None = None):
        if block is not None and not 0 <= block <= MAX_INT8_BLOCK:
            raise ValueError(f"int8 block must be in [0, {MAX_INT8_BLOCK}], not {block}")
        self.block = block  # None: choose by measured error

    def encode(self, x):
        self._check(x)
        if not np.all(np.isfinite(x)):
            raise ValueError("int8 codec cannot carry inf or NaN")
        rows, n = _rows(x.shape)
        x2 = np.ascontiguousarray(x).reshape(rows, n)
        if self.block is not None:
            return {"block": self.block}, list(quantize_int8(x2, self.block))
        # Auto: try one scale per row; its amax is the max of the block amaxes, so the costly
        # reduction over |x| is done once whichever way the choice goes.
        amax = group_amax(np.abs(x2), INT8_BLOCK)                       # (rows, groups)
        row = _quantize(x2, amax.max(axis=1, keepdims=True), 0)
        if amax.shape[1] == 1 or relative_error(x2, dequantize_int8(*row, 0)) <= INT8_ROW_MAX_ERR:
            return {"block": 0}, list(row)
        return {"block": INT8_BLOCK}, list(_quantize(x2, amax, INT8_BLOCK))

    def sizes(self, meta, dtype, shape):
        self._check_meta(meta, dtype)
        block = meta.get("block") if set(meta) == {"block"} else None
        if not isinstance(block, int) or isinstance(block, bool) or not 0 <= block <= MAX_INT8_BLOCK:
            raise ValueError(f"int8 codec: bad meta {meta!r}")
        rows, n = _rows(shape)
        return [rows * n, rows * int8_groups(n, block) * 4]

    def decode(self, meta, dtype, shape, bufs):
        rows, n = _rows(shape)
        block = meta["block"]
        q = _view(bufs[0], np.int8, (rows, n))
        s = _view(bufs[1], np.float32, (rows, int8_groups(n, block)))
        return dequantize_int8(q, s, block).reshape(shape)


def int8_groups(n: int, block: int) -> int:
    """Scales per row: one when per-row (block 0) or when a row fits in one block."""
    return 1 if block == 0 or n <= block else -(-n // block)


def group_amax(a: np.ndarray, block: int) -> np.ndarray:
    """Max of each scale group of |x| given as a (rows, n) -> (rows, groups)."""
    rows, n = a.shape
    if n == 0:
        return np.zeros((rows, 1), np.float32)
    if int8_groups(n, block) == 1:
        return a.max(axis=1, keepdims=True)
    # reduceat is ~2x faster than max(axis=2) over short blocks and handles a short last block.
    return np.maximum.reduceat(a, np.arange(0, n, block), axis=1)


def _times_groups(a: np.ndarray, v: np.ndarray, block: int) -> np.ndarray:
    """Each value of a (rows, n) times the factor of its group in v (rows, groups), as float32."""
    rows, n = a.shape
    groups = v.shape[1]
    if groups == 1:
        return np.multiply(a, v, dtype=np.float32)
    if n % block == 0:
        a3 = a.reshape(rows, groups, block)                             # (rows, groups, block)
        return np.multiply(a3, v[:, :, None], dtype=np.float32).reshape(rows, n)
    # A short last block: spell the factors out per value (< 2 rows*n, since block < n here).
    return np.multiply(a, np.repeat(v, block, axis=1)[:, :n], dtype=np.float32)


def _quantize(x: np.ndarray, amax: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    # A scale never goes below the smallest normal float32, so 1/scale stays finite: groups
    # whose values are all below ~1.5e-36 get an absolute error under 6e-39 instead.
    scale = np.maximum(amax / np.float32(127), TINY)                    # (rows, groups)
    # Round the scale down where 127 * scale rounds past amax, so that decoded values never
    # exceed their group's max: near float32's max that would be inf.
    with np.errstate(over="ignore"):
        past = scale * np.float32(127) > amax
    scale = np.where(past, np.nextafter(scale, np.float32(0)), scale)
    t = _times_groups(x, np.float32(1) / scale, block)                  # (rows, n) in [-127, 127]
    # |x| <= amax, so |t| <= 127 up to rounding of 1/scale: rint cannot reach 128, no clip.
    return np.rint(t, out=t).astype(np.int8), scale


def quantize_int8(x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """x (rows, n) float32 -> (q int8 (rows, n), scales float32 (rows, groups))."""
    return _quantize(x, group_amax(np.abs(x), block), block)


def dequantize_int8(q: np.ndarray, scale: np.ndarray, block: int) -> np.ndarray:
    """Inverse of quantize_int8: (rows, n) int8 and (rows, groups) scales -> (rows, n) float32."""
    # Received scales are data: inf or NaN in them make inf or NaN values, not warnings.
    with np.errstate(all="ignore"):
        return _times_groups(q, scale, block)


def relative_error(x: np.ndarray, y: np.ndarray) -> float:
    """||x - y|| / ||x|| (0 for an all-zero x)."""
    with np.errstate(over="ignore", invalid="ignore"):
        norm, err = float(np.linalg.norm(x)), float(np.linalg.norm(x - y))
    if not (np.isfinite(norm) and np.isfinite(err)):  # squares past float32: redo in float64
        x64 = x.astype(np.float64)
        norm, err = float(np.linalg.norm(x64)), float(np.linalg.norm(x64 - y))
    return err / norm if norm else 0.0


CODECS: dict[str, Codec] = {c.name: c for c in (Raw(), Fp32(), Fp16(), Int8())}
ACTIVATION_CODECS = ("fp32", "fp16", "int8")


def encode_tensor(t: Any) -> tuple[dict, list[np.ndarray]]:
    """Encode a sending-side Tensor: (descriptor without frame indices, payload buffers)."""
    codec = CODECS.get(t.codec)
    if codec is None:
        raise ValueError(f"unknown codec {t.codec!r}")
    if t.is_received:
        # Forwarding what came in (an echo, a relay) sends the frames as they are: no decode,
        # no second quantization, no copy.
        return ({"codec": t.codec, "dtype": t.dtype, "shape": list(t.shape), "meta": t.meta},
                list(t._buffers))
    meta, bufs = codec.encode(t.array())
    dtype = t.dtype if t.codec == "raw" else "float32"
    return {"codec": t.codec, "dtype": dtype, "shape": list(t.shape), "meta": meta}, bufs
