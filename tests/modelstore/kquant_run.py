"""Teacher-forced logits of a GGUF through our engine (one process, or a chain of shards), and
their distance to llama.cpp's top-5 (the bounds the default model meets)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from services.modelstore.weight_cache import load_weights
from services.modelstore.weights import ShardWeights
from services.shard.inprocess import Chunk, PageAllocator, Pipeline, build_batch
from services.shard.kv_cache import KVConfig, PagedKVCache
from services.shard.model import ShardModel

PAGES, PAGE = 16, 16
LAYERED = ("attn_norm", "wqkv", "wo", "ffn_norm", "w_gate_up", "w_down")


def sub_range(w: ShardWeights, start: int, end: int, n_layers: int) -> ShardWeights:
    """Layers [start, end) of full-range weights, as read_weights(start, end) would give them: one
    GGUF read serves every shard of a test (a cold read parses the 49k-token vocabulary each time)."""
    # The per-layer extras too (biases, q/k norms, post norms): a range keeps only its own layers'.
    layers = {k: _layers(getattr(w, k), start, end) for k in LAYERED + ShardWeights.LAYER_EXTRAS
              if getattr(w, k) is not None}
    return replace(w, start=start, end=end, **layers,
                   token_embd=w.token_embd if start == 0 else None,
                   output_norm=w.output_norm if end == n_layers else None,
                   output=w.output if end == n_layers else None)


def _layers(a, start: int, end: int):
    if hasattr(a, "layers"):                                   # QLayers
        return type(a)(a.layers[start:end])
    if hasattr(a, "kind"):                                     # QStack
        return type(a)(a.kind, a.data[start:end], a.cols)
    return a[start:end]


def teacher_forced(path: Path, tokens: list[int], splits: tuple[int, ...] = (), root: Path | None = None) -> np.ndarray:
    """Logits (len(tokens), vocab) float32 at each position, one token per step, through shards cut
    at `splits` (none: one process)."""
    loaded = load_weights(path, 0, _n_layers(path), "quantized", root=root)
    cfg = loaded.config
    edges = (0,) + tuple(splits) + (cfg.n_layers,)
    shards = []
    for a, b in zip(edges, edges[1:]):
        w = sub_range(loaded.weights, a, b, cfg.n_layers)
        shards.append(ShardModel(cfg, w, PagedKVCache.for_model(cfg, a, b, KVConfig(PAGES, PAGE))))
    chain = Pipeline(shards)
    pages = PageAllocator(PAGES, PAGE)
    return np.array([chain.forward(build_batch([Chunk(0, [t], i)], pages))[0] for i, t in enumerate(tokens)])


def _n_layers(path: Path) -> int:
    from services.modelstore.gguf_meta import read_metadata
    meta = read_metadata(path)
    return int(meta[f"{meta['general.architecture']}.block_count"])


@dataclass
class Parity:
    top1_equal: bool        # wherever llama.cpp's margin >= 1.0
    sure: int               # positions with that margin
    max_diff: float         # of the top-5 logits
    mean_diff: float

    def holds(self) -> bool:
        return self.top1_equal and self.max_diff <= 1.0 and self.mean_diff <= 0.35

    def __str__(self) -> str:
        return (f"top-1 {'equal' if self.top1_equal else 'DIFFERENT'} at {self.sure} sure positions, top-5 "
                f"|diff| max {self.max_diff:.3f} mean {self.mean_diff:.3f}")


def parity(logits: np.ndarray, top5: list) -> Parity:
    """logits (positions, vocab) against llama.cpp's top5 [[(id, logit) x 5] per position]."""
    ids = np.array([[t[0] for t in p] for p in top5])
    ref = np.array([[t[1] for t in p] for p in top5], np.float64)
    sure = ref[:, 0] - ref[:, 1] >= 1.0
    d = np.abs(np.take_along_axis(logits, ids, 1) - ref)
    return Parity(bool((logits.argmax(1)[sure] == ids[sure, 0]).all()), int(sure.sum()),
                  float(d.max()), float(d.mean()))
