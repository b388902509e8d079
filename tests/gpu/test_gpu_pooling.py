"""The GPU last shard pools embeddings as the CPU's does: GpuShardModel.forward_pooled (its
final hidden states to the host, normed and pooled there) against ShardModel.forward_pooled
on the same tiny model, with a batch of embeddings only (no row samples) and one beside a
sampling row."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from services.shard.inprocess import Chunk, PageAllocator, build_batch

from .test_gpu_model import PAGE, PAGES, cpu_model, gpu_model, tiny  # noqa: F401 (a fixture)

STEPS = [[Chunk("a", list(range(3, 12)), 0), Chunk("b", [5, 6, 7], 0)],      # embeddings only
         [Chunk("c", [9, 10], 0), Chunk("a", list(range(20, 30)), 9)]]     # beside a sampling row


def pooled(model) -> list[np.ndarray]:
    alloc, out = PageAllocator(PAGES, PAGE), []
    for chunks in STEPS:
        want = np.array([c.seq == "c" for c in chunks], np.bool_)
        batch = build_batch(chunks, alloc, want_logits=want)
        rows = [i for i, c in enumerate(chunks) if c.seq != "c"]
        kinds = ["sum", "last"][:len(rows)]
        logits, got = model.forward_pooled(batch, rows, kinds)
        assert np.asarray(logits).shape[0] == int(want.sum())
        assert got.dtype == np.float32 and got.shape == (len(rows), model.config.d_model)
        out.append(got)
    return out


@pytest.mark.parametrize("qtype", [QT.Q4_1, QT.F32])
def test_the_gpu_pools_as_the_cpu_does(dev, tiny, qtype):
    path, root = tiny(qtype)
    for g, w in zip(pooled(gpu_model(dev, path, root)), pooled(cpu_model(path, root))):
        # As the forward's own comparison: K and V are float16 on the GPU.
        np.testing.assert_allclose(g, w, rtol=0, atol=5e-3 * np.abs(w).max())
