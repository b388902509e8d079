"""Inputs for the kernel tests: quantized weights of every device kind, caches, page tables."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT

from kernels.gpu.device import NumpyDevice
from kernels.qmatrix import QMatrix
from tests.modelstore.kquant_gguf import blocks

KINDS = ("q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k", "f16")


def weight(kind: str, rows: int, cols: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(blocks (rows, row bytes) uint8 of `kind`, the float32 weights they hold as the CPU reads them)."""
    m = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32) / np.sqrt(cols)
    if kind == "f16":
        data = m.astype(np.float16).view(np.uint8)
        return data, m.astype(np.float16).astype(np.float32)
    data = np.ascontiguousarray(blocks(m, QT[kind.upper()]).view(np.uint8).reshape(rows, -1))
    return data, QMatrix(kind, data, cols).dequantize()


def both(dev, make):
    """make(d) run on `dev` and on a NumpyDevice: (on dev, by the references), each a dict of host arrays."""
    ref = NumpyDevice()
    return make(dev), make(ref)


def put(dev, **arrays):
    """Host arrays onto dev (fresh, writable)."""
    return {k: dev.to_device(np.ascontiguousarray(a)) for k, a in arrays.items()}
