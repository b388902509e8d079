"""Put the q/k rows of a "neox"-pairing model into llama's "normal" RoPE pairing, once, at load.

neox rotates dims (i, i + n_rot/2) of a head together, normal rotates (2i, 2i+1) by the same angle.
Moving row i to 2i and row i + n_rot/2 to 2i+1 in every q and k head (of the projection, its bias
and the per-head norm weight) makes normal RoPE compute exactly neox's numbers, in the moved
places; q.k is the same sum in another order of terms, v and the output projection are untouched.
This is the permutation llama.cpp's converter applies to llama files, the other way round.
"""

from __future__ import annotations

import numpy as np


def head_order(head_dim: int, n_rot: int) -> np.ndarray:
    """(head_dim,) source dim of each dim of a head in the normal pairing."""
    half = n_rot // 2
    order = np.arange(head_dim)
    order[0:n_rot:2] = np.arange(half)
    order[1:n_rot:2] = np.arange(half, n_rot)
    return order


def qkv_order(n_heads: int, n_kv_heads: int, head_dim: int, n_rot: int) -> np.ndarray:
    """(qkv_dim,) source row of each row of a fused q|k|v projection; v rows stay where they are."""
    one = head_order(head_dim, n_rot)
    qk = np.concatenate([h * head_dim + one for h in range(n_heads + n_kv_heads)])
    v0 = (n_heads + n_kv_heads) * head_dim
    return np.concatenate([qk, np.arange(v0, v0 + n_kv_heads * head_dim)])
