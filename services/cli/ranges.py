"""Cutting a model's layers into contiguous ranges, one per shard, of about equal work."""

from __future__ import annotations


def split_layers(n_layers: int, n_shards: int, head_cost: float = 0.0) -> list[tuple[int, int]]:
    """Contiguous [a, b) ranges covering 0..n_layers.

    `head_cost` is the work of the output head in layers (it runs on the last shard): the last
    range gets that many fewer layers, so that no stage of the pipeline is the slow one.
    Without it the ranges are as even as possible, earlier ones larger.
    """
    if not 1 <= n_shards <= n_layers:
        raise ValueError(f"cannot cut {n_layers} layers into {n_shards} shards")
    if head_cost < 0:
        raise ValueError("head_cost must be >= 0")
    share = (n_layers + head_cost) / n_shards
    last = min(max(1, round(share - head_cost)), n_layers - (n_shards - 1))
    base, extra = divmod(n_layers - last, n_shards - 1) if n_shards > 1 else (0, 0)
    out, a = [], 0
    for i in range(n_shards - 1):
        b = a + base + (1 if i < extra else 0)
        out.append((a, b))
        a = b
    out.append((a, n_layers))
    return out


def head_cost_in_layers(meta: dict) -> float:
    """Multiply-adds of the output head over those of one layer, from GGUF metadata (llama)."""
    arch = meta.get("general.architecture", "llama")
    d = int(meta.get(f"{arch}.embedding_length", 0))
    ffn = int(meta.get(f"{arch}.feed_forward_length", 0))
    heads = int(meta.get(f"{arch}.attention.head_count", 0))
    kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))
    vocab = len(meta.get("tokenizer.ggml.tokens", ())) or int(meta.get(f"{arch}.vocab_size", 0))
    if not (d and ffn and heads):
        return 0.0
    kv = d * kv_heads // heads
    layer = d * (d + 2 * kv) + d * d + 3 * d * ffn    # wqkv, wo, gate+up, down
    return vocab * d / layer
