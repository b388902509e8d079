"""A GGUF's metadata and tensor index, each tensor's bytes a view of one read-only map of the file:
what read_weights needs of gguf's GGUFReader, without its cost.

GGUFReader makes a numpy view of every element of every metadata array: 2.5 s of CPU for the
default model's 49k-token vocabulary, paid by every shard at once when a cluster starts cold.
This walks the header with gguf_meta's bounds-checked cursor (0.1 s) and maps the tensors. Each
tensor's `data` is shaped as GGUFReader shapes it: numpy order (the row length last), in its
element type for float and integer tensors, and as rows of bytes for block kinds (and BF16).
"""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from services.modelstore.errors import BadModelFile
from services.modelstore.gguf_meta import _parse_header

MAX_DIMS = 4                      # ggml's GGML_MAX_DIMS
_ELEMENTS = {QT.F32: np.float32, QT.F16: np.float16, QT.F64: np.float64, QT.I8: np.int8,
             QT.I16: np.int16, QT.I32: np.int32, QT.I64: np.int64}


@dataclass(frozen=True)
class Field:
    """A metadata value, read as GGUFReader's fields are (`contents()`)."""
    value: Any

    def contents(self) -> Any:
        return self.value


@dataclass(frozen=True)
class Tensor:
    name: str
    tensor_type: QT
    shape: tuple[int, ...]        # ggml order: the row length first
    data: np.ndarray              # numpy order, a view of the file's map


class TensorFile:
    """`fields` (key -> Field) and `tensors` (in file order) of the GGUF at `path`; BadModelFile
    for a file whose header or tensor index does not read, or whose tensors run past its end."""

    def __init__(self, path: str | Path):
        try:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                meta, cur, n_tensors = _parse_header(mm)
                index = []
                for _ in range(n_tensors):
                    name = cur.string()
                    n_dims = cur.scalar("<I")
                    if not 0 < n_dims <= MAX_DIMS:
                        raise BadModelFile(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS})")
                    dims = tuple(cur.scalar("<Q") for _ in range(n_dims))
                    index.append((name, dims, cur.scalar("<I"), cur.scalar("<Q")))
                header_end = cur.pos
            whole = np.memmap(path, dtype=np.uint8, mode="r") if index else np.zeros(0, np.uint8)
        except (OSError, ValueError) as e:
            if isinstance(e, BadModelFile):
                raise
            raise BadModelFile(f"cannot read {path}: {e}") from e
        align = meta.get("general.alignment", 32)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise BadModelFile(f"GGUF alignment {align!r} is not a power of two")
        start = -(-header_end // align) * align
        self.fields = {k: Field(v) for k, v in meta.items()}
        self.tensors = [_tensor(whole, start, *entry) for entry in index]


def _tensor(whole: np.ndarray, start: int, name: str, dims: tuple[int, ...], raw_type: int,
            offset: int) -> Tensor:
    try:
        qtype = QT(raw_type)
    except ValueError:
        raise BadModelFile(f"tensor {name!r} has unknown type {raw_type}") from None
    shape = tuple(reversed(dims))
    if qtype in _ELEMENTS:
        dtype = np.dtype(_ELEMENTS[qtype]).newbyteorder("<")
    else:
        if qtype not in GGML_QUANT_SIZES:
            raise BadModelFile(f"tensor {name!r} has type {qtype.name}, whose block size is unknown")
        block, size = GGML_QUANT_SIZES[qtype]
        if shape[-1] % block:
            raise BadModelFile(f"tensor {name!r}: rows of {shape[-1]} are not whole {qtype.name} blocks")
        shape, dtype = shape[:-1] + (shape[-1] // block * size,), np.dtype(np.uint8)
    nbytes = math.prod(shape) * dtype.itemsize
    at = start + offset
    if offset % dtype.itemsize or at + nbytes > whole.size:
        raise BadModelFile(f"tensor {name!r} ({nbytes} bytes at offset {at}) runs past the end of "
                           f"the file ({whole.size} bytes) or is misaligned")
    data = whole[at:at + nbytes].view(dtype).reshape(shape)
    return Tensor(name, qtype, dims, data)
