"""A weight matrix kept in its GGUF block-quantized form (ggml's Q4_0, Q4_1, Q8_0 layouts), rows = outputs.

Each row is the GGUF blocks of one output row: 32 weights per block, the block's scale `d` (and for
Q4_1 its minimum `m`) as float16, then the quants. In Q4_0/Q4_1 byte i of the quants holds weight i
in its low nibble and weight i + 16 in its high nibble; Q8_0 holds 32 int8 quants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

QK = 32                                                        # weights per block, every kind
QUANT_KINDS = {"q4_0": (QK, 18), "q4_1": (QK, 20), "q8_0": (QK, 34)}   # kind -> (block elems, block bytes)


class BadQuantShape(ValueError):
    """The bytes, kind or shape given do not describe a quantized matrix."""


def _block_bytes(kind: str) -> int:
    if kind not in QUANT_KINDS:
        raise BadQuantShape(f"unknown quant kind {kind!r}; expected one of {sorted(QUANT_KINDS)}")
    return QUANT_KINDS[kind][1]


@dataclass(frozen=True)
class QMatrix:
    """(rows, cols) weights stored as GGUF blocks; `data` is uint8 (rows, cols // 32 * block bytes)."""

    kind: str
    data: np.ndarray
    cols: int
    address: int = field(init=False, repr=False, compare=False)   # of data, for the C kernel (.ctypes: 1 us)

    def __post_init__(self):
        bb = _block_bytes(self.kind)
        if self.cols <= 0 or self.cols % QK:
            raise BadQuantShape(f"cols {self.cols} is not a positive multiple of {QK}")
        d = self.data
        if not isinstance(d, np.ndarray) or d.dtype != np.uint8 or d.ndim != 2:
            raise BadQuantShape("data must be a 2-D uint8 array (rows, row bytes)")
        if d.shape[1] != self.cols // QK * bb:
            raise BadQuantShape(f"{self.kind} rows of {self.cols} weights take {self.cols // QK * bb} bytes, "
                                f"data has {d.shape[1]}")
        if not d.flags.c_contiguous:
            raise BadQuantShape("data must be C-contiguous")
        object.__setattr__(self, "address", d.ctypes.data)

    def __reduce__(self):
        return QMatrix, (self.kind, self.data, self.cols)        # a copy or unpickle recomputes `address`

    @property
    def rows(self) -> int:
        return self.data.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    @property
    def dtype(self):
        return np.float32                                      # what products with it compute in

    def dequantize(self, rows=None) -> np.ndarray:
        """float32 (n, cols) exactly as ggml dequantizes; rows: optional index array (e.g. token ids)."""
        data = self.data if rows is None else self.data[np.asarray(rows, dtype=np.intp).reshape(-1)]
        n = data.shape[0]
        blocks = data.reshape(n * (self.cols // QK), _block_bytes(self.kind))
        return _DEQUANT[self.kind](blocks).reshape(n, self.cols)


def _f16(col: np.ndarray) -> np.ndarray:
    """(nb, 2) uint8 -> (nb, 1) float32 of the little-endian float16 they hold."""
    return np.ascontiguousarray(col).view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(nb, 16) packed bytes -> (nb, 32) uint8: low nibbles are weights 0..15, high nibbles 16..31."""
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1)


def _dequant_q4_0(b: np.ndarray) -> np.ndarray:
    d = _f16(b[:, 0:2])
    q = _nibbles(b[:, 2:18]).astype(np.int8) - np.int8(8)
    return d * q.astype(np.float32)


def _dequant_q4_1(b: np.ndarray) -> np.ndarray:
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    return d * _nibbles(b[:, 4:20]).astype(np.float32) + m


def _dequant_q8_0(b: np.ndarray) -> np.ndarray:
    d = _f16(b[:, 0:2])
    return d * b[:, 2:34].view(np.int8).astype(np.float32)


_DEQUANT = {"q4_0": _dequant_q4_0, "q4_1": _dequant_q4_1, "q8_0": _dequant_q8_0}


def from_gguf(raw: np.ndarray, kind: str, rows: int, cols: int) -> QMatrix:
    """The QMatrix over a GGUF tensor's bytes (uint8, flat or (rows, row bytes)); no copy when contiguous."""
    bb = _block_bytes(kind)
    if cols <= 0 or cols % QK or rows <= 0:
        raise BadQuantShape(f"shape ({rows}, {cols}) is not a positive (rows, multiple of {QK})")
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise BadQuantShape(f"raw GGUF bytes must be uint8, got {raw.dtype}")
    row_bytes = cols // QK * bb
    if raw.size != rows * row_bytes:
        raise BadQuantShape(f"{kind} ({rows}, {cols}) takes {rows * row_bytes} bytes, got {raw.size}")
    return QMatrix(kind, np.ascontiguousarray(raw).reshape(rows, row_bytes), cols)
