"""A tensor inside a message: an array plus the codec it travels with.

On the sending side a Tensor wraps the array to encode. On the receiving side it holds the
payload frames as views (no copy) and decodes on `.array()`; fp32 and raw decode to a view of
the received frame itself. A received tensor put in a message again (an echo, a relay) goes out
as the very frames it came in, never decoded and re-quantized.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .codecs import CODECS
from .dtypes import dtype_name


class Tensor:
    __slots__ = ("codec", "shape", "dtype", "meta", "_array", "_buffers")

    def __init__(self, array: np.ndarray, codec: str = "raw"):
        if codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}; known: {', '.join(CODECS)}")
        self.codec = codec
        self.shape = tuple(int(d) for d in array.shape)
        self.dtype = dtype_name(array.dtype)
        self.meta: dict[str, Any] = {}
        self._array: np.ndarray | None = array
        self._buffers: Sequence[memoryview] = ()

    @classmethod
    def received(cls, codec: str, dtype: str, shape: tuple[int, ...], meta: dict,
                 buffers: Sequence[memoryview]) -> "Tensor":
        t = cls.__new__(cls)
        t.codec, t.dtype, t.shape, t.meta = codec, dtype, shape, meta
        t._array, t._buffers = None, buffers
        return t

    def array(self) -> np.ndarray:
        """The values, decoded from the wire if this tensor was received."""
        if self._array is None:
            self._array = CODECS[self.codec].decode(self.meta, self.dtype, self.shape, self._buffers)
        return self._array

    @property
    def is_received(self) -> bool:
        """True when this tensor came off the wire (and holds its payload frames)."""
        return bool(self._buffers)

    @property
    def nbytes_on_wire(self) -> int:
        """Payload bytes as received (0 for a tensor built to be sent)."""
        return sum(len(b) for b in self._buffers)

    def __repr__(self) -> str:
        return f"Tensor(codec={self.codec!r}, dtype={self.dtype}, shape={self.shape})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        a, b = self.array(), other.array()
        return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)

    __hash__ = None  # mutable cache inside; equality is by value
