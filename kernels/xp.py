"""Pick the array module a forward runs on: numpy, or cupy imported only when asked for."""

from __future__ import annotations

import numpy as np


class ArrayModuleUnavailable(RuntimeError):
    """The requested array module (cupy) is not installed or has no usable device."""


def get_xp(name: str = "numpy"):
    """Return the module named `name` ("numpy" or "cupy"); cupy is imported here and only here."""
    if name == "numpy":
        return np
    if name == "cupy":
        try:
            import cupy  # noqa: PLC0415 - lazy on purpose: CPU hosts have no cupy
        except ImportError as e:
            raise ArrayModuleUnavailable("cupy is not installed (pip install cupy-cuda12x, or "
                                         "cupy-cuda13x for CUDA 13)") from e
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise ArrayModuleUnavailable("cupy found no CUDA device")
        except cupy.cuda.runtime.CUDARuntimeError as e:
            raise ArrayModuleUnavailable(f"cupy cannot reach a CUDA device: {e}") from e
        return cupy
    raise ValueError(f"unknown array module {name!r}: use 'numpy' or 'cupy'")


def to_numpy(x) -> np.ndarray:
    """Host copy of an array from either module (no copy for numpy)."""
    return x if isinstance(x, np.ndarray) else x.get()
