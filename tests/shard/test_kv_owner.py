"""A shard's KV follows one scheduler run's page tables: a new run drops what a gone one held."""

import numpy as np

from services.shard.kv_cache import KVConfig, PagedKVCache
from services.shard.kv_owner import DROP, STALE, TAKE, KVOwner


def test_the_first_scheduler_takes_the_kv_and_keeps_it():
    o = KVOwner()
    assert o.batch_from("scheduler-0", 5, owner_live=False) == TAKE
    assert o.batch_from("scheduler-0", 5, owner_live=True) == TAKE
    assert o.drops == 0


def test_a_new_epoch_of_the_scheduler_drops_the_old_ones_kv_and_its_late_batches_are_stale():
    o = KVOwner()
    o.batch_from("scheduler-0", 5, owner_live=True)
    # The old run may still look live to this shard (its heartbeats not yet expired): a new
    # epoch of the same name replaced it all the same.
    assert o.batch_from("scheduler-0", 9, owner_live=True) == DROP
    assert o.batch_from("scheduler-0", 5, owner_live=False) == STALE
    assert (o.name, o.epoch, o.drops) == ("scheduler-0", 9, 1)


def test_another_scheduler_drops_only_a_gone_owners_kv():
    o = KVOwner()
    o.batch_from("scheduler-0", 5, owner_live=True)
    assert o.batch_from("scheduler-1", 7, owner_live=False) == DROP
    o2 = KVOwner()
    o2.batch_from("scheduler-0", 5, owner_live=True)
    assert o2.batch_from("scheduler-1", 7, owner_live=True) == TAKE and o2.drops == 0


def test_an_owner_replaced_by_a_new_epoch_is_dropped_at_once():
    o = KVOwner()
    o.batch_from("scheduler-0", 5, owner_live=True)
    assert not o.gone("shard-1", 3) and not o.gone("scheduler-0", 4)
    assert o.gone("scheduler-0", 5) and o.name == "" and o.drops == 1
    assert o.batch_from("scheduler-0", 8, owner_live=False) == TAKE    # nothing left to drop


def test_dropping_forgets_every_written_slot():
    kv = PagedKVCache(1, 1, 2, KVConfig(num_pages=4, page_size=2))
    kv.written[:] = np.array([2, 1, 0, 2], np.int32)
    assert kv.pages_held == 3
    kv.drop_all()
    assert kv.pages_held == 0
