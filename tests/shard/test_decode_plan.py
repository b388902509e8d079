"""plan_decode (one C call) against its definition, batch.validate + check_written + plan_attention:
the same plan for every batch they pass, None for every batch they refuse, and the same slots
marked written after it."""

import numpy as np
import pytest

from kernels import native_lib
from services.shard.batch import BadBatch, ForwardBatch, validate
from services.shard.decode_plan import mark_decoded, plan_decode
from services.shard.kv_cache import KVConfig, KVMissing, PagedKVCache
from services.shard.plan import plan_attention

PAGE, PAGES, VOCAB, D = 4, 8, 50, 3

lib = native_lib.load()
pytestmark = pytest.mark.skipif(lib is None, reason="the C library is not built")


def random_batch(rng, first: bool) -> ForwardBatch:
    """Mostly decode batches near the edges of validity: positions around page ends, page ids just
    out of range, -1 padding, tokens at the vocabulary's ends, now and then a prompt row or a
    wrong dtype."""
    s = int(rng.integers(1, 5))
    pos = rng.integers(-1, 4 * PAGE, s).astype(np.int32)
    qlens = np.ones(s, np.int32)
    if rng.random() < 0.1:
        qlens[0] = 2
        pos = np.insert(pos, 1, pos[0] + 1)
    table = rng.integers(-1, PAGES + 1, (s, int(rng.integers(1, 6)))).astype(np.int32)
    if rng.random() < 0.7:                                   # mostly tables that hold their pages
        table = np.where(table < 0, rng.integers(0, PAGES, table.shape), table).astype(np.int32)
        table[table >= PAGES] = PAGES - 1
    t = pos.shape[0]
    b = ForwardBatch(positions=pos, query_lens=qlens, page_table=table)
    if first:
        b.tokens = rng.integers(-1, VOCAB + 1, t).astype(np.int64 if rng.random() < 0.05 else np.int32)
    else:
        b.hidden = np.zeros((t, D), np.float32 if rng.random() < 0.95 else np.float64)
    if rng.random() < 0.3:
        b.want_logits = rng.random(s) < 0.5
    return b


def cache(rng) -> PagedKVCache:
    kv = PagedKVCache(1, 1, 2, KVConfig(num_pages=PAGES, page_size=PAGE))
    kv.written[:] = np.where(rng.random(PAGES) < 0.8, PAGE, rng.integers(0, PAGE + 1, PAGES))
    return kv


def reference(kv, b, first):
    try:
        validate(b, first=first, d_model=D, vocab_size=VOCAB, num_pages=PAGES, page_size=PAGE)
        kv.check_written(b)
    except (BadBatch, KVMissing):
        return None
    return plan_attention(b, PAGE, np.dtype(np.float32), np, bias=False, rows_alone=True)


@pytest.mark.parametrize("first", [True, False])
def test_the_c_plan_is_the_numpy_plan_and_refuses_what_the_checks_refuse(first):
    rng = np.random.default_rng(7)
    accepted = refused = 0
    for _ in range(3000):
        kv, b = cache(rng), random_batch(rng, first)
        want = reference(kv, b, first)
        got = plan_decode(lib, kv, b, first=first, vocab_size=VOCAB, d_model=D)
        decodes = b.num_tokens == b.num_seqs and b.positions.dtype == np.int32 and (
            not first or b.tokens.dtype == np.int32)
        if want is None or not decodes:
            assert got is None
            refused += want is None
            continue
        assert got is not None
        accepted += 1
        for field in ("write_pages", "write_slots", "decode_rows", "decode_table", "decode_lens"):
            w, g = getattr(want, field), getattr(got, field)
            assert w.shape == g.shape and (w == g).all() and np.asarray(w).dtype.kind == g.dtype.kind, field
        assert got.decode_bias is None and got.prefills == []
        marked = kv.written.copy()
        mark_decoded(lib, kv, got)
        reference_kv = PagedKVCache(1, 1, 2, KVConfig(num_pages=PAGES, page_size=PAGE))
        reference_kv.written[:] = marked
        reference_kv.mark_written(b)
        assert (kv.written == reference_kv.written).all()
    assert accepted > 300 and refused > 300            # both sides of every check are exercised
