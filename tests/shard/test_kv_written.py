"""The paged KV cache knows which slots this process wrote, and refuses batches resting on others."""

import numpy as np
import pytest

from services.shard.batch import ForwardBatch
from services.shard.kv_cache import KVConfig, KVMissing, PagedKVCache

PAGE = 4


def batch(*seqs):
    """seqs: (start, n, pages) each -> a validated-shape ForwardBatch (tokens only, no model needed)."""
    width = max(len(p) for _, _, p in seqs)
    table = np.full((len(seqs), width), -1, np.int32)
    for i, (_, _, p) in enumerate(seqs):
        table[i, :len(p)] = p
    return ForwardBatch(
        positions=np.concatenate([np.arange(s, s + n, dtype=np.int32) for s, n, _ in seqs]),
        query_lens=np.array([n for _, n, _ in seqs], np.int32), page_table=table,
        tokens=np.zeros(sum(n for _, n, _ in seqs), np.int32))


def cache():
    return PagedKVCache(1, 1, 2, KVConfig(num_pages=8, page_size=PAGE))


def test_a_fresh_cache_takes_prefills_from_position_zero_only():
    kv = cache()
    kv.check_written(batch((0, 9, [3, 5, 1])))
    with pytest.raises(KVMissing, match=r"sequence 1 goes on from position 2, but page 6 .its positions 0..\) "
                                        r"holds 0 of the 2 slots"):
        kv.check_written(batch((0, 3, [2]), (2, 1, [6])))


def test_written_slots_count_per_page_and_cover_exactly_what_was_written():
    kv = cache()
    kv.mark_written(batch((0, 6, [3, 5]), (0, 1, [7])))          # page 3 full, page 5 slots 0..1, page 7 slot 0
    assert kv.written.tolist() == [0, 0, 0, 4, 0, 2, 0, 1]
    kv.check_written(batch((6, 1, [3, 5]), (1, 2, [7])))          # exactly covered
    with pytest.raises(KVMissing, match="sequence 0 goes on from position 7, but page 5"):
        kv.check_written(batch((7, 1, [3, 5])))                 # slot 2 of page 5 never written
    # A page shared as a prefix (the scheduler's prefix cache): another sequence may go on from it.
    kv.check_written(batch((4, 3, [3, 0])))
    kv.mark_written(batch((6, 3, [3, 5, 4])))
    assert kv.written.tolist() == [0, 0, 0, 4, 1, 4, 0, 1]             # positions 6, 7 on page 5, 8 on page 4
    kv.check_written(batch((9, 1, [3, 5, 4])))
