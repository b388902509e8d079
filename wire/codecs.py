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

RAW_DTYPES = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                        "int64", "uint64", "float16", "float32", "float64"})
INT8_BLOCK = 32
INT8_ROW_MAX_ERR = 0.01  # relative L2 error above which per-block scales are used
FP16_MAX = np.float32(65504.0)


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
        if str(x.dtype) not in RAW_DTYPES:
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
        # Saturate finite values past the half range instead of turning them into inf.
        clipped = np.clip(x, -FP16_MAX, FP16_MAX)
        clipped = np.where(np.isfinite(x), clipped, x)
        return {}, [clipped.astype(np.float16)]

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
        self.block = block  # None: choose by measured error

    def encode(self, x):
        self._check(x)
        if not np.all(np.isfinite(x)):
            raise ValueError("int8 codec cannot carry inf or NaN")
        rows, n = _rows(x.shape)
        x2 = np.ascontiguousarray(x).reshape(rows, n)
        if self.block is not None:
            block = self.block
            q, s = quantize_int8(x2, block)
        else:
            block, (q, s) = 0, quantize_int8(x2, 0)
            if x2.size and n > INT8_BLOCK and relative_error(x2, dequantize_int8(q, s, 0)) > INT8_ROW_MAX_ERR:
                block, (q, s) = INT8_BLOCK, quantize_int8(x2, INT8_BLOCK)
        return {"block": block}, [q, s]

    def sizes(self, meta, dtype, shape):
        self._check_meta(meta, dtype)
        block = meta.get("block") if set(meta) == {"block"} else None
        if not isinstance(block, int) or isinstance(block, bool) or not 0 <= block <= 1 << 20:
            raise ValueError(f"int8 codec: bad meta {meta!r}")
        rows, n = _rows(shape)
        groups = 1 if block == 0 else -(-n // block)
        return [rows * n, rows * groups * 4]

    def decode(self, meta, dtype, shape, bufs):
        rows, n = _rows(shape)
        block = meta["block"]
        q = _view(bufs[0], np.int8, (rows, n))
        groups = 1 if block == 0 else -(-n // block)
        s = _view(bufs[1], np.float32, (rows, groups))
        return dequantize_int8(q, s, block).reshape(shape)


def quantize_int8(x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """x (rows, n) float32 -> (q int8 (rows, n), scales float32 (rows, groups))."""
    rows, n = x.shape
    if block == 0 or n == 0:
        g = x.reshape(rows, 1, n)
    else:
        pad = -n % block
        g = np.pad(x, ((0, 0), (0, pad))).reshape(rows, -1, block)
    amax = np.max(np.abs(g), axis=2) if n else np.zeros((rows, 1), np.float32)
    scale = (amax / np.float32(127)).astype(np.float32)                # (rows, groups)
    safe = np.where(scale > 0, scale, np.float32(1))
    q = np.rint(g / safe[:, :, None]).clip(-127, 127).astype(np.int8)
    return q.reshape(rows, -1)[:, :n].copy(), scale


def dequantize_int8(q: np.ndarray, scale: np.ndarray, block: int) -> np.ndarray:
    rows, n = q.shape
    if block == 0 or n == 0:
        return q.astype(np.float32) * scale[:, :1]
    per_value = np.repeat(scale, block, axis=1)[:, :n]                 # (rows, n)
    return q.astype(np.float32) * per_value


def relative_error(x: np.ndarray, y: np.ndarray) -> float:
    """||x - y|| / ||x|| (0 for an all-zero x)."""
    norm = float(np.linalg.norm(x))
    return float(np.linalg.norm(x - y)) / norm if norm else 0.0


CODECS: dict[str, Codec] = {c.name: c for c in (Raw(), Fp32(), Fp16(), Int8())}
ACTIVATION_CODECS = ("fp32", "fp16", "int8")


def encode_tensor(t: Any) -> tuple[dict, list[np.ndarray]]:
    """Encode a sending-side Tensor: (descriptor without frame indices, payload buffers)."""
    codec = CODECS.get(t.codec)
    if codec is None:
        raise ValueError(f"unknown codec {t.codec!r}")
    meta, bufs = codec.encode(t.array())
    dtype = t.dtype if t.codec == "raw" else "float32"
    return {"codec": t.codec, "dtype": dtype, "shape": list(t.shape), "meta": meta}, bufs
