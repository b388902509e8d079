"""A CUDA graph's stand-in for NumpyDevice (kernels/gpu/device.py): the launches made inside a
capture, recorded with the addresses of the arrays they read, and run by their numpy references at
each replay on what those addresses hold then."""

from __future__ import annotations

import weakref

import numpy as np

from kernels.gpu.ref_quant import root_array


class CaptureError(RuntimeError):
    """A host copy, an allocation, a wait or an eager product inside a graph capture (none can be
    part of a graph), or a replay reading memory freed since its capture."""


class RecordedGraph:
    """The stand-in's graph: launches recorded at capture, run by their references at each replay."""

    def __init__(self):
        self.launches: list[tuple[object, tuple]] = []   # (kernels.Kernel, its arguments)

    def replay(self) -> None:
        for kernel, args in self.launches:
            kernel.reference(*(a.array(kernel) if isinstance(a, Address) else a for a in args))


class Address:
    """Where a recorded launch's array lies: its owner (held weakly, as a CUDA graph holds a pointer
    and not the allocation), its offset there and its layout; made into the same view at replay."""

    def __init__(self, a: np.ndarray, root: np.ndarray):
        self.root = weakref.ref(root)
        self.offset = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        self.shape, self.strides, self.dtype = a.shape, a.strides, a.dtype

    @classmethod
    def of(cls, a):
        if not isinstance(a, np.ndarray) or not a.size:        # scalars, and arrays nothing reads
            return a
        return cls(a, root_array(a))

    def array(self, kernel) -> np.ndarray:
        root = self.root()
        if root is None:
            raise CaptureError(f"{kernel.name}: a replayed graph reads an array freed since its capture (on a "
                               "GPU, whatever took its memory): keep a graph's buffers as long as the graph")
        return np.ndarray(self.shape, self.dtype, buffer=root, offset=self.offset, strides=self.strides)
