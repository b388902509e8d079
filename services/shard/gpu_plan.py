"""What a step tells the device before it runs, packed into one int32 header copied in one upload:
per row the token, position, KV slot, sequence and keys seen, the rows whose logits the head
computes, then the sequences' page tables. A graph captured for `rows` rows reads a header laid
out for that many rows, so the layout depends on the row count only; rows past the batch's are
padding (slot -1: no KV written; 0 keys: attention gives 0) and cost nothing but their compute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.shard.batch import ForwardBatch

FIELDS = ("tokens", "positions", "slots", "row_seq", "row_len", "head_rows")


@dataclass(frozen=True)
class Layout:
    """Offsets of a header for `rows` rows and a page table of `table_rows` x `width` pages."""
    rows: int
    table_rows: int
    width: int

    @property
    def size(self) -> int:
        return len(FIELDS) * self.rows + self.table_rows * self.width

    def views(self, header) -> dict:
        """The fields as views of a device header (each (rows,), the table (table_rows, width))."""
        r = self.rows
        out = {f: header[i * r:(i + 1) * r] for i, f in enumerate(FIELDS)}
        t0 = len(FIELDS) * r
        out["table"] = header[t0:t0 + self.table_rows * self.width].reshape(self.table_rows, self.width)
        return out


def pages_needed(batch: ForwardBatch, page_size: int) -> int:
    """Pages of the longest sequence's table this batch reads (a validated batch)."""
    return int(batch.positions.max()) // page_size + 1


def stage(batch: ForwardBatch, layout: Layout, page_size: int, first: bool) -> tuple[np.ndarray, int]:
    """The header of a validated batch for `layout` (layout.rows >= its tokens, table big enough),
    and how many of its leading int32s to upload (the table rows past the batch's are not read)."""
    t, s = batch.num_tokens, batch.num_seqs
    r = layout.rows
    h = np.zeros(layout.size, np.int32)
    f = {name: h[i * r:(i + 1) * r] for i, name in enumerate(FIELDS)}
    pos = batch.positions.astype(np.int64)
    seq_of = np.repeat(np.arange(s), batch.query_lens.astype(np.int64))               # (T,)
    table = batch.page_table
    if first:
        f["tokens"][:t] = batch.tokens
    f["positions"][:t] = pos
    f["slots"][:t] = table[seq_of, pos // page_size].astype(np.int64) * page_size + pos % page_size
    f["slots"][t:] = -1
    f["row_seq"][:t] = seq_of
    f["row_len"][:t] = pos + 1
    rows = batch.logit_rows()
    f["head_rows"][:rows.shape[0]] = rows
    n = min(table.shape[1], pages_needed(batch, page_size))
    t0 = len(FIELDS) * r
    h[t0:t0 + layout.table_rows * layout.width].reshape(layout.table_rows, layout.width)[:s, :n] = \
        np.maximum(table[:, :n], 0)
    return h, t0 + s * layout.width


def padding(layout: Layout) -> np.ndarray:
    """A header whose every row is padding: what a warm-up or capture runs on."""
    h = np.zeros(layout.size, np.int32)
    h[2 * layout.rows:3 * layout.rows] = -1                                           # slots
    return h
