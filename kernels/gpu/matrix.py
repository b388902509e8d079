"""A weight matrix (rows = outputs) on the device, as the kernels multiply it: its GGUF blocks where
the device has a kernel for their kind (ref_quant.KINDS), float16 rows otherwise. A matrix whose
row blocks differ in kind (a fused q|k|v with v in Q6_K beside Q4_K q and k) keeps one part per
kind; each part writes its own columns of the product."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.gpu.ref_quant import KINDS, BadDeviceMatrix, row_bytes
from kernels.qmatrix import QMatrix, QRows

BLOCK_KINDS = frozenset(KINDS) - {"f16"}      # GGUF kinds kept in their blocks on the device


@dataclass(frozen=True)
class Part:
    kind: str
    data: object          # (rows, row bytes) uint8 on the device
    rows: int
    row0: int             # its first row in the whole matrix

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


@dataclass(frozen=True)
class DeviceMatrix:
    parts: tuple[Part, ...]
    cols: int

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)


def host_parts(m) -> list[tuple[str, np.ndarray]]:
    """(kind, (rows, row bytes) uint8) per part of a host matrix: a float array (out, in), a QMatrix
    or a QRows. Blocks of a kind without a device kernel (Q5_0, Q5_1) are dequantized to float16,
    as are float weights (F32, F16, BF16 files)."""
    if isinstance(m, QRows):
        return [hp for p in m.parts for hp in host_parts(p)]
    if isinstance(m, QMatrix):
        if m.kind in BLOCK_KINDS:
            return [(m.kind, m.data)]
        return [("f16", _f16_bytes(m.dequantize()))]
    a = np.asarray(m)
    if a.ndim != 2 or a.dtype.kind != "f":
        raise BadDeviceMatrix(f"a weight matrix is a 2-D float array, QMatrix or QRows, got {a.dtype} {a.shape}")
    return [("f16", _f16_bytes(a))]


def _f16_bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float16).view(np.uint8)


def from_parts(dev, parts: list[tuple[str, object]], cols: int) -> DeviceMatrix:
    """A DeviceMatrix over blocks already on the device (or host blocks, uploaded here)."""
    out, row0 = [], 0
    for kind, data in parts:
        rb = row_bytes(kind, cols)
        if data.ndim != 2 or data.shape[1] != rb or data.dtype != np.uint8:
            raise BadDeviceMatrix(f"{kind} rows of {cols} weights are {rb} bytes, got {data.dtype} {data.shape}")
        if isinstance(data, np.ndarray) and dev.xp is not np:
            data = dev.constant(data)
        out.append(Part(kind, data, int(data.shape[0]), row0))
        row0 += int(data.shape[0])
    return DeviceMatrix(tuple(out), cols)


def upload_matrix(dev, m) -> DeviceMatrix:
    """A host matrix (float array, QMatrix or QRows) on the device."""
    cols = m.cols if isinstance(m, (QMatrix, QRows)) else int(np.asarray(m).shape[1])
    return from_parts(dev, [(k, dev.constant(d)) for k, d in host_parts(m)], cols)
