"""The last shard's pooling for embeddings: a sequence's rows of a batch after the model's final
norm (llama.cpp's `t_embd`), summed ("sum": a mean's share, the scheduler divides) or one row
("last", "first"), on the host in float32."""

from __future__ import annotations

import numpy as np

from kernels.norm import rms_norm
from kernels.xp import to_numpy


def pool_rows(xp, h, cu: np.ndarray, seqs, kinds, norm_weight, eps: float) -> np.ndarray:
    """h (T, D) the final hidden states (before the final norm) on xp; cu (S+1,) each
    sequence's row offsets; for each sequence index of `seqs`, its rows pooled by its kind.
    Returns float32 (len(seqs), D) on the host."""
    out = np.empty((len(seqs), h.shape[1]), np.float32)
    for i, (s, kind) in enumerate(zip(seqs, kinds)):
        lo, hi = int(cu[s]), int(cu[s + 1])
        rows = h[lo:hi] if kind == "sum" else h[lo:lo + 1] if kind == "first" else h[hi - 1:hi]
        normed = to_numpy(rms_norm(xp, rows, norm_weight, eps))
        out[i] = normed.sum(axis=0, dtype=np.float64)   # one row for last and first
    return out
