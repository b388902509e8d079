"""A weight matrix kept in its GGUF block-quantized form (ggml's layouts), rows = outputs.

Each row is the GGUF blocks of one output row. Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 blocks hold 32 weights: the
block's scale `d` (and for Q4_1/Q5_1 its minimum `m`) as float16, then the quants; in the 4 and 5-bit
kinds byte i holds weight i in its low nibble and weight i + 16 in its high one (Q5's fifth bits in
a 32-bit `qh`). The K kinds (Q4_K, Q5_K, Q6_K) hold 256 weights a block, with 6 or 8-bit scales per
32 or 16 of them (kernels/native/qk.h); their dequantization here is the gguf package's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

QK = 32                                                        # weights per block of the 32-kinds
QKK = 256                                                      # of the K kinds
QUANT_KINDS = {"q4_0": (QK, 18), "q4_1": (QK, 20), "q5_0": (QK, 22), "q5_1": (QK, 24), "q8_0": (QK, 34),
               "q4_k": (QKK, 144), "q5_k": (QKK, 176), "q6_k": (QKK, 210),   # kind -> (block elems, block bytes)
               "q4_0_t16": (QK, 18)}     # Q4_0 in tiles of 16 rows (kernels.q4_0_tiles): its data rows are not its rows


class BadQuantShape(ValueError):
    """The bytes, kind or shape given do not describe a quantized matrix."""


def _block(kind: str) -> tuple[int, int]:
    if kind not in QUANT_KINDS:
        raise BadQuantShape(f"unknown quant kind {kind!r}; expected one of {sorted(QUANT_KINDS)}")
    return QUANT_KINDS[kind]


def _block_bytes(kind: str) -> int:
    return _block(kind)[1]


@dataclass(frozen=True)
class QMatrix:
    """(rows, cols) weights stored as GGUF blocks; `data` is uint8 (rows, cols // 32 * block bytes)."""

    kind: str
    data: np.ndarray
    cols: int
    address: int = field(init=False, repr=False, compare=False)   # of data, for the C kernel (.ctypes: 1 us)

    def __post_init__(self):
        per, bb = _block(self.kind)
        if self.cols <= 0 or self.cols % per:
            raise BadQuantShape(f"cols {self.cols} is not a positive multiple of {per} ({self.kind})")
        d = self.data
        if not isinstance(d, np.ndarray) or d.dtype != np.uint8 or d.ndim != 2:
            raise BadQuantShape("data must be a 2-D uint8 array (rows, row bytes)")
        if d.shape[1] != self.cols // per * bb:
            raise BadQuantShape(f"{self.kind} rows of {self.cols} weights take {self.cols // per * bb} bytes, "
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
        data, kind = self.data, self.kind
        if kind == "q4_0_t16":
            from kernels.q4_0_tiles import untile
            data, kind = untile(data), "q4_0"
        data = data if rows is None else data[np.asarray(rows, dtype=np.intp).reshape(-1)]
        n = data.shape[0]
        if kind not in _DEQUANT:
            return gguf_dequantize(data, GGMLQuantizationType[kind.upper()]).reshape(n, self.cols)
        blocks = data.reshape(n * (self.cols // QK), _block_bytes(kind))
        return _DEQUANT[kind](blocks).reshape(n, self.cols)


@dataclass(frozen=True)
class QRows:
    """A matrix made of row blocks in different block kinds (a fused q|k|v whose v is Q6_K beside Q4_K
    q and k, as Q4_K_M files have): parts stacked along rows, all of `cols` columns."""

    parts: tuple[QMatrix, ...]
    kind = "mixed"                          # not a field: no single kind names the whole

    def __post_init__(self):
        if not self.parts or not all(isinstance(p, QMatrix) for p in self.parts):
            raise BadQuantShape("QRows takes one or more QMatrix parts")
        if len({p.cols for p in self.parts}) != 1:
            raise BadQuantShape(f"QRows parts differ in width: {[p.cols for p in self.parts]}")

    @property
    def cols(self) -> int:
        return self.parts[0].cols

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    @property
    def dtype(self):
        return np.float32

    def dequantize(self, rows=None) -> np.ndarray:
        full = np.concatenate([p.dequantize() for p in self.parts])
        return full if rows is None else full[np.asarray(rows, dtype=np.intp).reshape(-1)]


QUANTIZED = (QMatrix, QRows)       # what kernels.qmatmul multiplies


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
    per, bb = _block(kind)
    if cols <= 0 or cols % per or rows <= 0:
        raise BadQuantShape(f"shape ({rows}, {cols}) is not a positive (rows, multiple of {per})")
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise BadQuantShape(f"raw GGUF bytes must be uint8, got {raw.dtype}")
    row_bytes = cols // per * bb
    if raw.size != rows * row_bytes:
        raise BadQuantShape(f"{kind} ({rows}, {cols}) takes {rows * row_bytes} bytes, got {raw.size}")
    return QMatrix(kind, np.ascontiguousarray(raw).reshape(rows, row_bytes), cols)
