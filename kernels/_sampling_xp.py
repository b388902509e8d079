"""Which array module (numpy or cupy) an array belongs to, without importing cupy up front."""

import numpy as np


def array_module(a):
    """numpy for host arrays, cupy for device arrays; cupy is imported only when one is seen."""
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy  # lazy: hosts without a GPU never import it

        return cupy
    return np


def to_host(a) -> np.ndarray:
    """A numpy copy of a numpy or cupy array (small results only: tokens, logprobs)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)
