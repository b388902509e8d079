"""A step of decode tokens (one a sequence) checked and planned in one C call (kernels/native/step.c).

For such a batch, `batch.validate`, the cache's `check_written` and `plan_attention(rows_alone=True)`
make ~40 numpy calls, ~0.1 ms a step while the kernels' threads wait. They stay the definition:
`plan_decode` gives their plan when they would pass the batch, and None when the batch is of
another kind or fails a check, so that they run and say what is wrong.
"""

from __future__ import annotations

import numpy as np

from services.shard.plan import AttentionPlan


def _i32(a, ndim: int) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == np.int32 and a.ndim == ndim and a.flags.c_contiguous


def plan_decode(lib, kv, batch, *, first: bool, vocab_size: int, d_model: int) -> AttentionPlan | None:
    """The rows-alone plan of a decode batch for a shard whose cache is `kv` (host arrays), or None."""
    pos, qlens, table, tokens, w = (batch.positions, batch.query_lens, batch.page_table, batch.tokens,
                                    batch.want_logits)
    if not (_i32(pos, 1) and _i32(qlens, 1) and _i32(table, 2)):
        return None
    s = pos.shape[0]
    if qlens.shape[0] != s or table.shape[0] != s:
        return None
    if first:
        if batch.hidden is not None or not _i32(tokens, 1) or tokens.shape[0] != s:
            return None
    else:
        h = batch.hidden
        if tokens is not None or not isinstance(h, np.ndarray) or h.dtype != np.float32 or h.shape != (s, d_model):
            return None
    if w is not None and not (isinstance(w, np.ndarray) and w.dtype == np.bool_ and w.shape == (s,)):
        return None
    written = kv.written
    pages, slots, lens = np.empty(s, np.int64), np.empty(s, np.int64), np.empty(s, np.int32)
    dec_table, n = np.empty(table.size, np.int32), np.zeros(1, np.int64)
    if lib.lb_decode_plan(pos.ctypes.data, qlens.ctypes.data, tokens.ctypes.data if first else None,
                          table.ctypes.data, s, table.shape[1], vocab_size, written.shape[0], kv.page_size,
                          written.ctypes.data, pages.ctypes.data, slots.ctypes.data, lens.ctypes.data,
                          dec_table.ctypes.data, n.ctypes.data) != 0:
        return None
    n = int(n[0])
    return AttentionPlan(write_pages=pages, write_slots=slots, decode_rows=np.arange(s),
                         decode_table=dec_table[:s * n].reshape(s, n), decode_bias=None, decode_lens=lens,
                         prefills=[])


def mark_decoded(lib, kv, plan: AttentionPlan) -> None:
    """The cache's mark_written, after a plan of plan_decode ran: each row's slot counts as written."""
    pages, slots = plan.write_pages, plan.write_slots
    lib.lb_mark_written(kv.written.ctypes.data, pages.ctypes.data, slots.ctypes.data, pages.shape[0])
