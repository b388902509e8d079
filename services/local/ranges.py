"""Cutting a model's layers into contiguous ranges, one per shard."""

from __future__ import annotations


def split_layers(n_layers: int, n_shards: int) -> list[tuple[int, int]]:
    """Contiguous [a, b) ranges covering 0..n_layers, as even as possible, earlier ones larger."""
    if not 1 <= n_shards <= n_layers:
        raise ValueError(f"cannot cut {n_layers} layers into {n_shards} shards")
    base, extra = divmod(n_layers, n_shards)
    out, a = [], 0
    for i in range(n_shards):
        b = a + base + (1 if i < extra else 0)
        out.append((a, b))
        a = b
    return out
