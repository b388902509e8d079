"""A batch that does not fit the shard is refused with BadBatch before any state changes."""

import numpy as np
import pytest

from services.shard.batch import BadBatch, ForwardBatch, layout_arrays
from services.shard.kv_cache import KVMissing
from tests.engine.conftest import make_shard


def ok_batch(**over):
    b = dict(tokens=np.array([1, 2, 3, 4], np.int32), positions=np.array([0, 1, 2, 7], np.int32),
             query_lens=np.array([3, 1], np.int32), page_table=np.array([[0, -1], [1, 2]], np.int32))
    b.update(over)
    return ForwardBatch(**b)


@pytest.fixture(scope="module")
def first(tiny_path, tiny_cache):
    return make_shard(tiny_path, 0, 2, num_pages=4, page_size=4, root=tiny_cache)


@pytest.fixture(scope="module")
def middle(tiny_path, tiny_cache):
    return make_shard(tiny_path, 1, 2, num_pages=4, page_size=4, root=tiny_cache)


def test_a_batch_resting_on_keys_never_written_is_refused_before_any_state_changes(tiny_path, tiny_cache):
    fresh = make_shard(tiny_path, 0, 2, num_pages=4, page_size=4, root=tiny_cache)
    with pytest.raises(KVMissing, match="sequence 1 goes on from position 7, but page 1"):
        fresh.forward(ok_batch())
    assert not fresh.kv.k.any() and not fresh.kv.written.any()


def test_the_valid_batch_runs(first):
    # Sequence 1 goes on from position 7: its keys 0..6 are written first.
    first.forward(ok_batch(tokens=np.arange(7, dtype=np.int32), positions=np.arange(7, dtype=np.int32),
                           query_lens=np.array([7], np.int32), page_table=np.array([[1, 2]], np.int32)))
    assert first.forward(ok_batch()).shape == (4, 64)


@pytest.mark.parametrize("over,why", [
    (dict(tokens=None, hidden=np.zeros((4, 64), np.float32)), "takes tokens"),
    (dict(tokens=np.array([1, 2, 3], np.int32)), "tokens must be 4"),
    (dict(tokens=np.array([1, 2, 3, 101], np.int32)), r"\[0, 101\)"),
    (dict(tokens=np.array([1., 2, 3, 4])), "integer"),
    (dict(positions=np.array([0, 2, 3, 7], np.int32)), "positions must run"),
    (dict(positions=np.array([-1, 0, 1, 7], np.int32)), "positions must run"),
    (dict(query_lens=np.array([2, 1], np.int32)), "sum"),
    (dict(query_lens=np.array([4, 0], np.int32)), "sum"),
    (dict(page_table=np.array([[0, -1]], np.int32)), "rows"),
    (dict(page_table=np.array([[0], [1]], np.int32)), "too short"),
    (dict(page_table=np.array([[0, -1], [-1, 2]], np.int32)), "page this shard does not have"),
    (dict(page_table=np.array([[0, -1], [1, 4]], np.int32)), "page this shard does not have"),
    (dict(want_logits=np.array([1, 0])), "want_logits"),
    (dict(tokens=np.zeros(0, np.int32), positions=np.zeros(0, np.int32),
          query_lens=np.zeros(0, np.int32), page_table=np.zeros((0, 1), np.int32)), "empty"),
])
def test_bad_batch_for_first_shard(first, over, why):
    before = first.kv.k.copy()
    with pytest.raises(BadBatch, match=why):
        first.forward(ok_batch(**over))
    np.testing.assert_array_equal(first.kv.k, before)


@pytest.mark.parametrize("over,why", [
    (dict(), "takes hidden"),                                                   # tokens to a middle shard
    (dict(tokens=None, hidden=np.zeros((4, 32), np.float32)), r"\(4, 64\)"),
    (dict(tokens=None, hidden=np.zeros((4, 64), np.float64)), "float32"),
])
def test_bad_batch_for_middle_shard(middle, over, why):
    with pytest.raises(BadBatch, match=why):
        middle.forward(ok_batch(**over))


def test_a_forwards_layout_lists_become_int32_arrays_with_the_page_table_padded():
    pos, qlens, table = layout_arrays([4, 5, 6, 9], [3, 1], [[0], [1, 2]])
    assert pos.dtype == qlens.dtype == table.dtype == np.int32
    assert pos.tolist() == [4, 5, 6, 9] and qlens.tolist() == [3, 1]
    assert table.tolist() == [[0, -1], [1, 2]]                # -1 padded, as validate() reads it
    _, _, table = layout_arrays([7], [1], [[3, 8]])
    assert table.tolist() == [[3, 8]]


@pytest.mark.parametrize("layout", [([1 << 31], [1], [[0]]), ([0], [1 << 40], [[0]]),
                                    ([0], [1], [[0, -(1 << 33)]])])
def test_a_layout_value_past_int32_is_a_bad_batch(layout):
    with pytest.raises(BadBatch, match="outside int32"):
        layout_arrays(*layout)
