"""Grammar masks on the last shard: rows of logits limited to the tokens a packed bitmask allows.

A mask is uint32 words, ceil(V/32) per row, token t allowed where bit t % 32 of word t // 32 is
set (the layout llguidance, xgrammar and vLLM use). Tokens past the mask's bits are not allowed.
Works on numpy and cupy alike: the unpacking is shifts and a gather, nothing host-only.
"""

from __future__ import annotations

import numpy as np

from kernels._sampling_xp import array_module


class BadMask(ValueError):
    """The masks do not fit the logits: wrong dtype, shape or rows."""


def allowed(masks, vocab: int, xp=np):
    """Boolean (R, vocab) of packed masks (R, W) uint32."""
    if xp is np:   # numpy unpacks bits in C: a third of the time of the shifts below
        n = min(vocab, masks.shape[1] * 32)
        bits = np.unpackbits(np.ascontiguousarray(masks, "<u4").view(np.uint8), axis=1,
                             count=n, bitorder="little").view(np.bool_)
        if n == vocab:
            return bits
        out = np.zeros((masks.shape[0], vocab), np.bool_)
        out[:, :n] = bits
        return out
    ids = xp.arange(vocab, dtype=np.int64)
    words = masks[:, xp.minimum(ids >> 5, masks.shape[1] - 1)]
    bits = (words >> (ids & 31).astype(np.uint32)) & np.uint32(1)
    return (bits != 0) & (ids < masks.shape[1] * 32)[None, :]


def apply_token_masks(logits, rows, masks):
    """`logits` (S, V) float32 with each row of `rows` limited to what its mask (row of `masks`,
    (len(rows), W) uint32) allows: others -inf. A copy; the input is never modified."""
    xp = array_module(logits)
    if getattr(masks, "dtype", None) != np.uint32 or masks.ndim != 2 or masks.shape[0] != len(rows):
        raise BadMask(f"masks must be uint32 (rows, words) for {len(rows)} rows, got "
                      f"{getattr(masks, 'dtype', type(masks))} {getattr(masks, 'shape', '')}")
    S, V = logits.shape
    if any(not 0 <= r < S for r in rows) or masks.shape[1] == 0:
        raise BadMask(f"mask rows {list(rows)[:8]} are not rows of {S} logits")
    keep = allowed(xp.asarray(masks), V, xp)
    out = logits.copy()
    sel = xp.asarray(np.asarray(rows, np.int64))
    out[sel] = xp.where(keep, logits[sel], np.float32(-np.inf))
    return out
