"""The last shard's pooling (ShardModel.forward_pooled) against llama.cpp's embeddings of the
default model (tests/data/make_embed_refs.py): the mean and the last token of the hidden states
after the final norm. Each input is run whole and in two chunks (what the scheduler does to a
long input beside decodes: the chunks' sums add up), beside a sequence that samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from services.shard.inprocess import Chunk, PageAllocator, build_batch

REF = json.loads((Path(__file__).parents[1] / "data" /
                  "smollm2-135m-q4_1.embeddings.llamacpp.json").read_text())
MIN_COSINE = 0.999          # the bar against llama.cpp
PAGE, PAGES = 16, 64


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def model(model_path):
    from services.modelstore.weight_cache import load_weights
    from services.shard.kv_cache import KVConfig, PagedKVCache
    from services.shard.model import ShardModel
    from services.shard.service import weight_format

    loaded = load_weights(model_path, 0, 30, weight_format("cpu", "auto"))
    return ShardModel(loaded.config, loaded.weights,
                      PagedKVCache.for_model(loaded.config, 0, 30, KVConfig(PAGES, PAGE)))


def pooled(model, inputs, kind, split=None):
    """Every input pooled in one batch (with a 3-token sequence that samples first), or with
    `split` its first `split` tokens in one batch and the rest in the next."""
    pages = PageAllocator(PAGES, PAGE)
    out = np.zeros((len(inputs), model.config.d_model), np.float64)
    cuts = [(0, len(ids)) for ids in inputs] if split is None else \
        [(0, split), (split, None)]
    for lo, hi in ([(0, None)] if split is None else cuts):
        chunks = [Chunk("chat", [1, 2, 3], 0)] if lo == 0 else []
        chunks += [Chunk(i, ids[lo:hi], lo) for i, ids in enumerate(inputs)]
        want = np.array([c.seq == "chat" for c in chunks], np.bool_)
        batch = build_batch(chunks, pages, want_logits=want)
        rows = [i for i, c in enumerate(chunks) if c.seq != "chat"]
        kinds = ["sum" if kind == "mean" else kind] * len(rows)
        if kind == "last" and hi is not None:
            rows, kinds = [], []
        logits, got = model.forward_pooled(batch, rows, kinds) if rows else \
            (model.forward(batch), np.zeros((0, model.config.d_model), np.float32))
        assert logits.shape == (int(want.sum()), model.config.vocab_size)
        assert got.dtype == np.float32 and got.shape == (len(rows), model.config.d_model)
        for r, vec in zip(rows, got):
            out[chunks[r].seq] += vec
    if kind == "mean":
        out /= np.array([len(ids) for ids in inputs], np.float64)[:, None]
    return out


@pytest.mark.parametrize("kind", ["mean", "last"])
def test_pooled_hidden_states_match_llama_cpp(model, kind):
    got = pooled(model, REF["ids"], kind)
    cos = [cosine(g, w) for g, w in zip(got, REF["pooling"][kind])]
    assert min(cos) >= MIN_COSINE, cos
    # Not only the direction: the pooled vectors are llama.cpp's in length too (unnormalized).
    norms = [np.linalg.norm(g) / np.linalg.norm(w) for g, w in zip(got, REF["pooling"][kind])]
    assert max(abs(n - 1) for n in norms) < 0.02, norms


def test_chunks_pool_to_the_whole(model):
    """Two chunks' sums (KV of the first read by the second) make the mean of the whole run."""
    long_ones = [ids for ids in REF["ids"] if len(ids) > 6]
    whole = pooled(model, long_ones, "mean")
    split = pooled(model, long_ones, "mean", split=5)
    for a, b in zip(whole, split):
        assert cosine(a, b) > 0.99999
