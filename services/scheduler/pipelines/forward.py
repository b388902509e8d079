"""A MicroBatch of the policy as the `shard.forward` message the first shard runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

import wire
from wire.messages.sampling import SamplingParams
from wire.messages.shard import Forward, RouteStage

from ..batching.batches import MicroBatch
from .chains import Stage


def to_forward(batch: MicroBatch, sampling: Mapping[str, SamplingParams],
               histories: Mapping[str, Sequence[int]], chain: Sequence[Stage],
               masks: Mapping[str, np.ndarray] | None = None) -> Forward:
    """`sampling[rid]` is the request's SamplingParams, for each chunk that samples; a request is
    in `histories` only when its penalties need the tokens it has seen, and in `masks` (its
    packed uint32 mask) only when a grammar constrains its next token. `chain` is the pipeline
    the batch must take: the shards whose KV the policy's page tables describe."""
    chunks = batch.chunks
    tokens = np.fromiter((t for c in chunks for t in c.token_ids), np.int32, batch.num_tokens)
    samplers = [c for c in chunks if c.sample]
    hist = [histories.get(c.request_id, ()) for c in samplers]
    penalized = any(hist)
    masks = masks or {}
    mask_rows = [row for row, c in enumerate(samplers) if c.request_id in masks]
    pool_rows = [row for row, c in enumerate(chunks) if c.pool]
    return Forward(
        batch_id=batch.batch_id, first_layer=0,
        positions=[p for c in chunks for p in range(c.start, c.start + len(c.token_ids))],
        query_lens=[len(c.token_ids) for c in chunks],
        page_table=[list(c.page_table) for c in chunks],
        tokens=wire.Tensor(tokens),
        want_logits=None if len(samplers) == len(chunks) else
        wire.Tensor(np.array([c.sample for c in chunks], np.bool_)),
        sampling=[sampling[c.request_id] for c in samplers],
        steps=[c.step for c in samplers],
        history=wire.Tensor(np.fromiter((t for h in hist for t in h), np.int32))
        if penalized else None,
        history_lens=[len(h) for h in hist] if penalized else [],
        route=[RouteStage(s.name, s.epoch) for s in chain], hop=0,
        mask_rows=mask_rows,
        masks=wire.Tensor(np.stack([masks[samplers[r].request_id] for r in mask_rows]))
        if mask_rows else None,
        pool_rows=pool_rows, pool_kinds=[chunks[r].pool for r in pool_rows])
