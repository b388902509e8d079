"""Per-batch index arithmetic shared by every layer: where to write KV, what each query reads.

Computed once per forward on the host (numpy), then moved to the array module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.shard.batch import ForwardBatch


@dataclass
class Prefill:
    rows: slice           # the sequence's rows in the flattened token axis
    start: int            # position of its first row
    pages: object         # (n_pages,) int array on xp


@dataclass
class AttentionPlan:
    write_pages: object   # (T,) page of each token's KV
    write_slots: object   # (T,) slot inside that page
    decode_rows: object   # (Sd,) rows of single-token sequences, attended together
    decode_table: object  # (Sd, n_pages) int32, their pages, padding pointed at page 0
    decode_bias: object   # (Sd, n_pages * page_size) 0 for a real key, -inf past the context; or None
    decode_lens: np.ndarray   # (Sd,) int32 on the host, keys each sees (the native kernel's form)
    prefills: list[Prefill]


def plan_attention(batch: ForwardBatch, page_size: int, dtype, xp, bias: bool = True,
                   rows_alone: bool = False) -> AttentionPlan:
    """Derive the KV write slots and the read layout of a validated batch.

    bias=False leaves decode_bias None, for callers that read decode_lens instead (a decode step
    on a CPU: each numpy call here is a microsecond or two, and the whole plan is per token).
    rows_alone=True lists every row as a decode row (its own page table row and context length,
    no prefills), for the C decode kernel: a row's attention is then computed the same whether its
    prompt came in one chunk, in several, or token by token, and whatever else is in the batch."""
    pos = batch.positions.astype(np.int64)
    table = batch.page_table
    t, n_seqs = pos.shape[0], batch.num_seqs
    if t == n_seqs or rows_alone:               # validated lens are >= 1 and sum to T: all decodes
        rows = np.arange(t)
        seq_of = rows if t == n_seqs else np.repeat(np.arange(n_seqs), batch.query_lens.astype(np.int64))
        write_pages = table[seq_of, pos // page_size].astype(np.int64)
        dec, dec_rows, dec_ctx, prefills = seq_of, rows, pos + 1, []
    else:
        qlens = batch.query_lens.astype(np.int64)
        cu = batch.cu_lens()
        seq_of = np.repeat(np.arange(n_seqs), qlens)
        write_pages = table[seq_of, pos // page_size].astype(np.int64)
        ctx = pos[cu[1:] - 1] + 1                                         # (S,) keys each sequence sees
        dec = np.flatnonzero(qlens == 1)
        dec_rows, dec_ctx = cu[dec], ctx[dec]
        prefills = []
        for s in np.flatnonzero(qlens > 1):
            start = int(pos[cu[s]])
            used = (start + int(qlens[s]) - 1) // page_size + 1
            prefills.append(Prefill(slice(int(cu[s]), int(cu[s + 1])), start, xp.asarray(table[s, :used])))
    write_slots = pos % page_size
    n_pages = int((dec_ctx.max() + page_size - 1) // page_size) if dec.size else 0
    dec_table = np.ascontiguousarray(np.maximum(table[dec, :n_pages], 0), dtype=np.int32)
    dec_bias = None
    if bias:
        keys = np.arange(n_pages * page_size)
        dec_bias = xp.asarray(np.where(keys[None, :] < dec_ctx[:, None], 0.0, -np.inf).astype(dtype))
    return AttentionPlan(
        write_pages=xp.asarray(write_pages), write_slots=xp.asarray(write_slots),
        decode_rows=xp.asarray(dec_rows), decode_table=xp.asarray(dec_table),
        decode_bias=dec_bias, decode_lens=dec_ctx.astype(np.int32), prefills=prefills,
    )
