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


class KVMissing(Exception):
    """A batch needs keys this cache never held: its sequences' earlier positions were written by
    another process (a replica, or this shard before a restart). The caller must prefill again."""


class PagedKVCache:
    """k and v of layers [start, end): each (n_layers, num_pages, page_size, n_kv_heads, head_dim).

    Keys are stored after RoPE, keys and values as float16 (llama.cpp's default cache type: half the
    memory of float32 and half the bytes a decode step reads). Which page belongs to which sequence
    is the caller's business; the cache only counts, per page, the slots this process has written
    (`written`), so that a batch resting on KV it never computed is refused instead of attending to
    zeros.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, cfg: KVConfig,
                 dtype=np.float16, xp=np):
        shape = (n_layers, cfg.num_pages, cfg.page_size, n_kv_heads, head_dim)
        self.cfg = cfg
        self.k = xp.zeros(shape, dtype=dtype)
        self.v = xp.zeros(shape, dtype=dtype)
        # On the host whatever xp is: slots [0, written[p]) of page p hold keys this process wrote
        # (a sequence fills its pages in position order).
        self.written = np.zeros(cfg.num_pages, dtype=np.int32)

    @classmethod
    def for_model(cls, config, start: int, end: int, cfg: KVConfig, dtype=np.float16, xp=np):
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

    @property
    def pages_held(self) -> int:
        """Pages holding keys this process wrote (for the scheduler that drives it)."""
        return int(np.count_nonzero(self.written))

    def drop_all(self) -> None:
        """Forget every page's keys: the sequences they belonged to are gone."""
        self.written[:] = 0

    def check_written(self, batch) -> None:
        """Raise KVMissing unless positions [0, start) of each sequence of a validated batch lie in
        slots of its pages that this process has written."""
        ps = self.page_size
        table = batch.page_table
        starts = batch.positions[batch.cu_lens()[:-1]].astype(np.int64)                # (S,)
        first = np.arange(table.shape[1], dtype=np.int64) * ps                           # (P,)
        need = np.minimum(np.maximum(starts[:, None] - first[None, :], 0), ps)           # (S, P) slots each page must hold
        have = self.written[table.clip(0, self.num_pages - 1)]      # (S, P); unused columns may hold anything
        short = need > have
        if short.any():
            s, j = (int(x) for x in np.argwhere(short)[0])
            raise KVMissing(f"sequence {s} goes on from position {int(starts[s])}, but page "
                            f"{int(table[s, j])} (its positions {j * ps}..) holds {int(have[s, j])} "
                            f"of the {int(need[s, j])} slots it needs from this shard: prefill it again")

    def mark_written(self, batch) -> None:
        """Count the slots a validated batch's tokens were written to."""
        ps = self.page_size
        pos = batch.positions.astype(np.int64)                                           # (T,)
        seq_of = np.repeat(np.arange(batch.num_seqs), batch.query_lens.astype(np.int64))   # (T,)
        ends = pos % ps == ps - 1                   # the last row each page gets: one per page
        ends[batch.cu_lens()[1:] - 1] = True
        pages = batch.page_table[seq_of[ends], pos[ends] // ps]
        np.maximum.at(self.written, pages, (pos[ends] % ps + 1).astype(np.int32))
