"""The random draw of a sampled token: a pure function of (seed, step), so batches and restarts
cannot change it."""

import numpy as np

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(x: int) -> int:
    # SplitMix64's finalizer: a bijection on 64-bit ints whose output bits all depend on all
    # input bits, so neighbouring (seed, step) pairs give unrelated draws.
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def uniform(seed: int, step: int) -> float:
    """A uniform draw in [0, 1) with 24 bits, exactly representable in float32."""
    h = _mix64((_mix64(seed & _MASK) + (step + 1) * _GOLDEN) & _MASK)
    return (h >> 40) / float(1 << 24)


def uniforms(seeds, steps) -> np.ndarray:
    """One draw per row, float32 (B,): plain Python ints, so every platform gives the same bits."""
    return np.array([uniform(int(s), int(t)) for s, t in zip(seeds, steps)], dtype=np.float32)
