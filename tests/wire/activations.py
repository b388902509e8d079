"""Synthetic LLM hidden states: what the activation codecs are tuned and tested on."""

import numpy as np


def activations(rows: int, d: int = 576, seed: int = 0, outliers: int = 6,
                peak: float = 300.0) -> np.ndarray:
    """(rows, d) float32: gaussian per channel (varied scale), plus a few large outlier channels.

    Residual streams of llama-style models look like this: most channels are O(1) with
    channel-specific spread, while a handful of fixed channels carry magnitudes in the hundreds
    with a stable sign (the "massive activations" that make per-row int8 scales coarse).
    """
    rng = np.random.default_rng(seed)
    std = np.exp(rng.normal(0.0, 0.5, d))                      # (d,) per-channel spread
    mean = rng.normal(0.0, 0.2, d)                             # (d,)
    x = rng.normal(mean, std, (rows, d))                       # (rows, d)
    if outliers:
        ch = rng.choice(d, outliers, replace=False)
        mag = rng.uniform(peak / 6, peak, outliers) * rng.choice([-1.0, 1.0], outliers)
        x[:, ch] = mag * (1.0 + 0.1 * rng.standard_normal((rows, outliers)))
    return x.astype(np.float32)
