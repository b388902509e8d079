"""An in-process shard chain: a plain page allocator, batch building, and shards called in turn.

The scheduler does all of this across processes; this is the in-process version that tests,
benchmarks and tools use to run the engine without a bus.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from services.shard.batch import ForwardBatch
from services.shard.model import ShardModel


class OutOfPages(RuntimeError):
    pass


@dataclass
class PageAllocator:
    """Hands out KV pages to sequences; page_size and num_pages match the shards' KV caches."""

    num_pages: int
    page_size: int
    free: list[int] = field(default_factory=list)
    owned: dict[object, list[int]] = field(default_factory=dict)

    def __post_init__(self):
        self.free = list(range(self.num_pages - 1, -1, -1))

    def ensure(self, seq, n_positions: int) -> list[int]:
        """Pages of `seq`, grown to cover positions 0 .. n_positions-1."""
        pages = self.owned.setdefault(seq, [])
        while len(pages) * self.page_size < n_positions:
            if not self.free:
                raise OutOfPages(f"no free KV page for sequence {seq!r}")
            pages.append(self.free.pop())
        return pages

    def release(self, seq) -> None:
        self.free.extend(reversed(self.owned.pop(seq, [])))


@dataclass
class Chunk:
    seq: object            # any hashable sequence id
    tokens: Sequence[int]  # tokens fed this step
    start: int             # position of tokens[0]


def build_batch(chunks: Sequence[Chunk], pages: PageAllocator, want_logits=None) -> ForwardBatch:
    """One ForwardBatch for the chunks (first-shard form: tokens), allocating pages as needed."""
    tables = [pages.ensure(c.seq, c.start + len(c.tokens)) for c in chunks]
    width = max(len(t) for t in tables)
    table = np.full((len(chunks), width), -1, dtype=np.int32)
    for i, t in enumerate(tables):
        table[i, :len(t)] = t
    return ForwardBatch(
        tokens=np.concatenate([np.asarray(c.tokens, dtype=np.int32) for c in chunks]),
        positions=np.concatenate([np.arange(c.start, c.start + len(c.tokens), dtype=np.int32) for c in chunks]),
        query_lens=np.array([len(c.tokens) for c in chunks], dtype=np.int32),
        page_table=table,
        want_logits=None if want_logits is None else np.asarray(want_logits, dtype=bool),
    )


def identity(h: np.ndarray) -> np.ndarray:
    return h


class Pipeline:
    """Shards covering [0, n_layers) in order; `handoff` models the wire between two of them."""

    def __init__(self, shards: Sequence[ShardModel], handoff: Callable[[np.ndarray], np.ndarray] = identity):
        for a, b in zip(shards, shards[1:]):
            if a.end != b.start:
                raise ValueError(f"shard ranges do not chain: [{a.start}, {a.end}) then [{b.start}, {b.end})")
        if not (shards[0].first and shards[-1].last):
            raise ValueError("shards must run from the first layer to the last")
        self.shards, self.handoff = list(shards), handoff

    def forward(self, batch: ForwardBatch) -> np.ndarray:
        out = self.shards[0].forward(batch)
        for shard in self.shards[1:]:
            out = shard.forward(ForwardBatch(positions=batch.positions, query_lens=batch.query_lens,
                                             page_table=batch.page_table, hidden=self.handoff(out),
                                             want_logits=batch.want_logits))
        return out
