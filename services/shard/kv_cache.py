"""Paged KV storage of one shard: fixed-size pages, indexed by the page tables the scheduler sends."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KVConfig:
    num_pages: int
    page_size: int = 16

    def __post_init__(self):
        if self.num_pages < 1 or self.page_size < 1:
            raise ValueError(f"KV cache needs at least one page of one slot, got {self}")


class PagedKVCache:
    """k and v of layers [start, end): each (n_layers, num_pages, page_size, n_kv_heads, head_dim).

    Keys are stored after RoPE. Which page belongs to which sequence is the caller's business.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, cfg: KVConfig,
                 dtype=np.float32, xp=np):
        shape = (n_layers, cfg.num_pages, cfg.page_size, n_kv_heads, head_dim)
        self.cfg = cfg
        self.k = xp.zeros(shape, dtype=dtype)
        self.v = xp.zeros(shape, dtype=dtype)

    @classmethod
    def for_model(cls, config, start: int, end: int, cfg: KVConfig, dtype=np.float32, xp=np):
        return cls(end - start, config.n_kv_heads, config.head_dim, cfg, dtype, xp)

    @property
    def num_pages(self) -> int:
        return self.cfg.num_pages

    @property
    def page_size(self) -> int:
        return self.cfg.page_size

    @property
    def dtype(self):
        return self.k.dtype

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes
