"""KV pages: reference counts, prefix sharing over full pages, LRU eviction of unused cached pages."""

import pytest

from services.scheduler.batching.kv import KVManager
from services.scheduler.batching.pages import PagePool
from services.scheduler.batching.prefix_cache import PrefixCache, chain_key
from services.scheduler.batching.sequence import Request, Sequence
from services.scheduler.batching.stop_rules import StopState

P = 4


def seq(tokens, rid="r"):
    return Sequence(Request(rid, tuple(tokens), 8), 8, 0, StopState(max_tokens=8))


def computed(kv, s, n=None):
    """Give `s` pages for all its tokens and mark them computed, as a finished prefill would."""
    n = len(s.tokens) if n is None else n
    kv.grow(s, -(-n // P) - len(s.pages))
    s.num_computed = n
    kv.register_full_pages(s)


def test_pool_refuses_double_free_and_over_release():
    pool = PagePool(2)
    page = pool.allocate()
    with pytest.raises(AssertionError):
        pool.free(page)
    assert pool.unref(page) == 0
    with pytest.raises(AssertionError):
        pool.unref(page)


def test_a_shared_system_prompt_reuses_the_same_pages():
    kv = KVManager(16, P)
    system = list(range(100, 108))  # two full pages
    a = seq(system + [1, 2, 3], "a")
    computed(kv, a)
    b = seq(system + [7, 8], "b")
    assert kv.match_prefix(b) == 8
    assert b.pages == a.pages[:2] and b.num_computed == 8
    assert [kv.pool.refcount[p] for p in b.pages] == [2, 2]
    kv.check([a, b])


def test_a_later_turn_reuses_prompt_and_generated_pages():
    kv = KVManager(16, P)
    turn1 = seq(list(range(1, 7)), "t1")
    computed(kv, turn1)
    turn1.tokens += [50, 51, 52]                 # generated, then fed back as decode steps
    computed(kv, turn1)
    kv.release(turn1)
    turn2 = seq(turn1.tokens + [60, 61, 62, 63], "t2")
    assert kv.match_prefix(turn2) == 8           # both full pages, the second half generated
    kv.check([turn2])


def test_the_page_holding_the_last_token_is_never_matched():
    kv = KVManager(16, P)
    a = seq(range(1, 9), "a")                    # exactly two full pages
    computed(kv, a)
    again = seq(range(1, 9), "again")
    assert kv.match_prefix(again) == 4           # the last token must run to give logits
    assert again.remaining == 4


def test_released_cached_pages_stay_matchable_until_evicted_oldest_first():
    kv = KVManager(4, P)
    old, new = seq(range(1, 6), "old"), seq(range(11, 16), "new")
    computed(kv, old)                            # pages: 1 full (cached) + 1 partial
    kv.release(old)
    computed(kv, new)
    kv.release(new)
    assert kv.cache.num_evictable == 2 and kv.pool.num_free == 2
    taker = seq(range(30, 41), "taker")          # needs 3 pages: evicts the oldest cached one
    kv.grow(taker, 3)
    probe_old, probe_new = seq(range(1, 6)), seq(range(11, 16))
    assert kv.match_prefix(probe_old) == 0
    assert kv.match_prefix(probe_new) == 4
    kv.check([taker, probe_new, probe_old])


def test_a_matched_page_is_not_evictable_while_referenced():
    kv = KVManager(2, P)
    a = seq(range(1, 6), "a")
    computed(kv, a)
    kv.release(a)
    b = seq(range(1, 6), "b")
    kv.match_prefix(b)
    assert kv.cache.num_evictable == 0 and kv.available() == 1
    kv.check([b])


def test_a_hash_collision_is_a_miss_not_wrong_kv():
    cache = PrefixCache()
    key = chain_key(None, (1, 2))
    cache.insert(key, None, (1, 2), page=0)
    assert cache.lookup(key, None, (1, 2)) == 0
    assert cache.lookup(key, None, (3, 4)) is None   # same key forced, other content
    assert cache.lookup(key, 99, (1, 2)) is None


def test_the_same_prefix_computed_twice_keeps_one_cached_copy():
    kv = KVManager(8, P)
    a, b = seq(range(1, 6), "a"), seq(range(1, 6), "b")
    computed(kv, a)
    kv.grow(b, 2)                                # computed concurrently, before a was cached
    b.num_computed = 5
    kv.register_full_pages(b)
    assert kv.cache.num_indexed == 1
    kv.release(b)                                # b's duplicate page goes back to the free list
    kv.release(a)
    assert kv.pool.num_free == 7 and kv.cache.num_evictable == 1
    kv.check([])


def test_drop_cache_returns_every_page():
    kv = KVManager(8, P)
    a = seq(range(1, 10), "a")
    computed(kv, a)
    kv.release(a)
    kv.drop_cache()
    assert kv.pool.num_free == 8 and kv.cache.num_indexed == 0
    kv.check([])
