"""A dtype's name as it travels in a tensor's descriptor."""

from __future__ import annotations

import numpy as np

_DTYPE_NAMES: dict[np.dtype, str] = {}


def dtype_name(dtype: np.dtype) -> str:
    """str(dtype), which takes numpy ~10 us, remembered per dtype (a message makes several)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name
