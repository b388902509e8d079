"""Weights kept as GGUF's own quantized blocks, for the native CPU matmul (kernels.qmatmul).

A Q4_1 layer matrix is 5 bits a weight as GGUF stores it and 32 as float32: kept in blocks, a
decode step reads 6x fewer bytes, a shard's resident memory shrinks alike and its cache entry
is a plain copy of the file's bytes. Only the kinds the native kernel multiplies stay in
blocks; any other weight type is dequantized to float32 as before. Files that mix kinds (Q4_K_M:
Q4_K, Q6_K for some layers' v and down, sometimes Q5_0 or Q8_0) keep each matrix in its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as QT

from kernels.qmatrix import QUANT_KINDS, QMatrix, QRows

KIND_OF = {QT.Q4_0: "q4_0", QT.Q4_1: "q4_1", QT.Q5_0: "q5_0", QT.Q5_1: "q5_1", QT.Q8_0: "q8_0",
           QT.Q4_K: "q4_k", QT.Q5_K: "q5_k", QT.Q6_K: "q6_k"}
assert set(KIND_OF.values()) <= set(QUANT_KINDS)


@dataclass(frozen=True)
class QStack:
    """One quantized matrix per layer of a range: data (L, rows, row_bytes) uint8, C-contiguous."""

    kind: str
    data: np.ndarray
    cols: int

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, i: int) -> QMatrix:
        return QMatrix(self.kind, self.data[i], self.cols)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.data.shape[0], self.data.shape[1], self.cols)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)          # what the kernel computes in


@dataclass(frozen=True)
class QLayers:
    """One quantized matrix per layer where kinds differ between layers or between fused parts:
    each a QMatrix, or a QRows when its fused parts differ in kind."""

    layers: tuple[QMatrix | QRows, ...]

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, i: int) -> QMatrix | QRows:
        return self.layers[i]

    @property
    def shape(self) -> tuple[int, int, int]:
        return (len(self.layers),) + self.layers[0].shape

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in self.layers)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)


def kind_of(tensor) -> str | None:
    """The native kernel's name for a GGUF tensor's type, or None when it has no kernel."""
    return KIND_OF.get(tensor.tensor_type)


def quantized_matrix(tensor) -> QMatrix:
    """A GGUF tensor (out, in) of a kind in KIND_OF as a QMatrix over its own bytes."""
    cols = int(tensor.shape[0])                                    # ggml order: in first
    return QMatrix(kind_of(tensor), np.ascontiguousarray(tensor.data.reshape(-1, tensor.data.shape[-1])), cols)


def _rows(tensor) -> int:
    return int(np.prod(tensor.data.shape[:-1]))


def _fused(parts: list) -> QMatrix | QRows:
    """Tensors fused along `out`: one QMatrix when they share a kind, else a QRows whose parts join
    neighbours of one kind (q and k in Q4_K beside v in Q6_K: two parts, two kernel calls)."""
    groups: list[list[QMatrix]] = []
    for m in (quantized_matrix(t) for t in parts):
        if groups and groups[-1][0].kind == m.kind:
            groups[-1].append(m)
        else:
            groups.append([m])
    ms = [QMatrix(g[0].kind, np.ascontiguousarray(np.concatenate([m.data for m in g])), g[0].cols) for g in groups]
    return ms[0] if len(ms) == 1 else QRows(tuple(ms))


def quantized_stack(layer_tensors: list[list], alloc=None) -> QStack | QLayers | None:
    """Per layer, tensors fused along `out` (q|k|v, gate|up): one QStack when every tensor has one
    kind, else a QLayers; None when any tensor has no kernel or the parts differ in width (then:
    dequantize). `alloc(shape)` gives the QStack's uint8 array to fill (default: np.empty; the
    range cache gives its file's mapping, so a range is built straight into it)."""
    flat = [t for parts in layer_tensors for t in parts]
    kinds = {kind_of(t) for t in flat}
    widths = {int(t.shape[0]) for t in flat}
    if None in kinds or len(widths) != 1:
        return None
    if len(kinds) == 1:
        # Each tensor's bytes copied once, straight into its place: a range's matrices are GBs
        # at 8B, and a copy per concatenate and stack would hold them twice at the peak.
        rows = [sum(_rows(t) for t in parts) for parts in layer_tensors]
        width = flat[0].data.shape[-1]
        if len(set(rows)) != 1 or any(t.data.shape[-1] != width for t in flat):
            return None
        shape = (len(layer_tensors), rows[0], width)
        data = alloc(shape) if alloc is not None else np.empty(shape, dtype=np.uint8)
        for layer, parts in zip(data, layer_tensors):
            at = 0
            for t in parts:
                n = _rows(t)
                layer[at:at + n] = t.data.reshape(n, width)
                at += n
        return QStack(kinds.pop(), data, widths.pop())
    return QLayers(tuple(_fused(parts) for parts in layer_tensors))
