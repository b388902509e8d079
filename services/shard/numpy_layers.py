"""The layer loop of a CPU float32 shard without the C library's fused ops: numpy op by op.

Projections go to OpenBLAS in small-matrix calls (kernels.matmul's `split`), and decode rows read
their keys from the KV pages in place (kernels.attention_native, numpy itself without the library):
at batch 16 the gather copies were most of a step outside the matmuls.
"""

from __future__ import annotations

import numpy as np

from kernels.attention_native import attend_decode_paged
from services.shard.array_layers import ArrayLayers
from services.shard.plan import AttentionPlan


class NumpyLayers(ArrayLayers):
    """ArrayLayers on numpy float32; `rows_alone` attends every prompt row as a decode row of its
    own, as the native loop does (to compare the two bit for bit)."""

    bias = False            # decode rows read plan.decode_lens

    def __init__(self, config, layers, kv, start: int, rows_alone: bool = False, extras=None):
        super().__init__(np, config, layers, kv, start, split=True, extras=extras)
        self.rows_alone = rows_alone

    def _decode(self, q, kc, vc, plan: AttentionPlan, window: int = 0):
        return attend_decode_paged(q, kc, vc, plan.decode_table, plan.decode_lens, self.scale, window)
