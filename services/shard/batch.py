"""ForwardBatch: one step of work for a shard, as plain arrays in a flattened ("varlen") layout.

Tokens of all sequences are laid end to end: sequence s owns rows cu[s] .. cu[s+1]-1 where
cu = [0, cumsum(query_lens)]. A sequence's rows are consecutive positions start .. start+n-1;
its keys at positions < start are already in the KV cache (written by earlier steps), and
page_table[s] lists its pages (-1 padded) covering positions 0 .. start+n-1. Prefill chunks
(n > 1) and decode tokens (n == 1) of different sequences mix freely.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class BadBatch(ValueError):
    """The batch does not fit this shard: wrong inputs for its layer range, shapes, or pages."""


@dataclass
class ForwardBatch:
    positions: np.ndarray                 # int32 (T,) absolute position of each token
    query_lens: np.ndarray                # int32 (S,) tokens of each sequence in this batch
    page_table: np.ndarray                # int32 (S, max_pages), -1 padded
    tokens: np.ndarray | None = None      # int32 (T,), first shard only
    hidden: np.ndarray | None = None      # float32 (T, D), every later shard
    want_logits: np.ndarray | None = None  # bool (S,): logits of the sequence's last token; None = all

    @property
    def num_tokens(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_seqs(self) -> int:
        return int(self.query_lens.shape[0])

    def cu_lens(self) -> np.ndarray:
        """(S+1,) row offsets of each sequence in the flattened token axis."""
        cu = np.zeros(self.num_seqs + 1, dtype=np.int64)
        np.cumsum(self.query_lens, out=cu[1:])
        return cu

    def logit_rows(self) -> np.ndarray:
        """Rows (last token of each sequence wanting logits), in sequence order."""
        last = self.cu_lens()[1:] - 1
        return last if self.want_logits is None else last[np.asarray(self.want_logits, bool)]


def layout_arrays(positions: list[int], query_lens: list[int],
                  page_table: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A `shard.forward`'s layout lists as the int32 arrays of a ForwardBatch, the page table's
    rows -1 padded to the longest; BadBatch for a value outside int32."""
    try:
        pos = np.array(positions, np.int32)
        qlens = np.array(query_lens, np.int32)
        width = max(map(len, page_table), default=0)
        if all(len(row) == width for row in page_table):   # every decode step of one sequence
            table = np.array(page_table, np.int32).reshape(len(page_table), width)
        else:
            table = np.full((len(page_table), width), -1, np.int32)
            for i, row in enumerate(page_table):
                table[i, :len(row)] = row
    except OverflowError as e:
        raise BadBatch(f"the batch layout holds a value outside int32: {e}") from None
    return pos, qlens, table


def _int_array(name: str, a, ndim: int) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.ndim != ndim or a.dtype.kind not in "iu":
        got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
        raise BadBatch(f"{name} must be a {ndim}-d integer array, got {got}")
    return a


def validate(batch: ForwardBatch, *, first: bool, d_model: int, vocab_size: int,
             num_pages: int, page_size: int) -> None:
    """Raise BadBatch unless `batch` can run on a shard with these properties."""
    pos = _int_array("positions", batch.positions, 1)
    qlens = _int_array("query_lens", batch.query_lens, 1)
    table = _int_array("page_table", batch.page_table, 2)
    t, s = pos.shape[0], qlens.shape[0]
    if s == 0 or t == 0:
        raise BadBatch("empty batch")
    if table.shape[0] != s:
        raise BadBatch(f"page_table has {table.shape[0]} rows for {s} sequences")
    if (qlens < 1).any() or int(qlens.sum()) != t:
        raise BadBatch(f"query_lens (each >= 1) must sum to the {t} tokens")
    if first:
        if batch.hidden is not None or batch.tokens is None:
            raise BadBatch("the first shard takes tokens, not hidden states")
        tok = _int_array("tokens", batch.tokens, 1)
        if tok.shape[0] != t or (tok < 0).any() or (tok >= vocab_size).any():
            raise BadBatch(f"tokens must be {t} ids in [0, {vocab_size})")
    else:
        if batch.tokens is not None or batch.hidden is None:
            raise BadBatch("a shard after the first takes hidden states, not tokens")
        h = batch.hidden
        if not isinstance(h, np.ndarray) or h.dtype != np.float32 or h.shape != (t, d_model):
            got = f"{h.dtype} {h.shape}" if isinstance(h, np.ndarray) else type(h).__name__
            raise BadBatch(f"hidden must be float32 ({t}, {d_model}), got {got}")
    if batch.want_logits is not None:
        w = batch.want_logits
        if not isinstance(w, np.ndarray) or w.shape != (s,) or w.dtype != np.bool_:
            raise BadBatch(f"want_logits must be a bool array of shape ({s},)")
    cu = batch.cu_lens()
    start = pos[cu[:-1]].astype(np.int64)                                  # (S,)
    seq_of = np.repeat(np.arange(s), qlens)                                # (T,)
    if (start < 0).any() or (pos != start[seq_of] + (np.arange(t) - cu[seq_of])).any():
        raise BadBatch("each sequence's positions must run start, start+1, ... from a start >= 0")
    needed = (start + qlens - 1) // page_size + 1                          # pages each sequence uses
    if (needed > table.shape[1]).any():
        raise BadBatch("page_table is too short for the positions it must cover")
    used = np.arange(table.shape[1])[None, :] < needed[:, None]
    bad = used & ((table < 0) | (table >= num_pages))
    if bad.any():
        seq = int(np.argwhere(bad)[0][0])
        raise BadBatch(f"sequence {seq} lists a page this shard does not have (it has {num_pages})")
