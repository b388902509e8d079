"""Replicas of layer ranges make disjoint pipelines: chains in use keep their shards, a broken
one is rebuilt from spares or has none, and every further whole chain is a new pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field

import wire
from wire.messages.info import ShardInfo
from services.scheduler.pipelines.chains import assign_pipelines, assignment_key, find_chain


@dataclass
class Entry:
    name: str
    a: int
    b: int
    epoch: int = 1
    state: str = "ready"
    model: str = "M"
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.info = ShardInfo(layers=(self.a, self.b), model=self.model, n_layers=30,
                              num_pages=64, page_size=16)


def names(chains):
    return [None if c is None else [s.name for s in c] for c in chains]


def test_two_replicas_of_each_range_make_two_disjoint_pipelines():
    shards = [Entry("a0", 0, 15), Entry("b0", 15, 30), Entry("a1", 0, 15), Entry("b1", 15, 30)]
    assert names(assign_pipelines(shards, "M", [])) == [["a0", "b0"], ["a1", "b1"]]


def test_one_chain_is_what_find_chain_gives_and_a_partial_replica_makes_no_second():
    shards = [Entry("s0", 0, 13), Entry("s13", 13, 25), Entry("s25", 25, 30), Entry("s13b", 13, 25)]
    got = assign_pipelines(shards, "M", [])
    assert names(got) == [["s0", "s13", "s25"]]
    assert got[0] == find_chain(shards, "M")


def test_pipelines_in_use_keep_their_shards_whatever_the_names_sort_as():
    shards = [Entry("a0", 0, 15), Entry("b0", 15, 30), Entry("a1", 0, 15), Entry("b1", 15, 30)]
    assert names(assign_pipelines(shards, "M", [["a1", "b0"]])) == [["a1", "b0"], ["a0", "b1"]]


def test_a_pipeline_that_lost_a_shard_has_none_while_the_other_keeps_its_own():
    shards = [Entry("a0", 0, 15), Entry("a1", 0, 15), Entry("b1", 15, 30),
              Entry("b0", 15, 30, state="down")]
    got = assign_pipelines(shards, "M", [["a0", "b0"], ["a1", "b1"]])
    assert names(got) == [None, ["a1", "b1"]]


def test_a_spare_replica_replaces_the_lost_shard_and_a_restart_keeps_the_place():
    shards = [Entry("a0", 0, 15), Entry("a1", 0, 15), Entry("b1", 15, 30), Entry("b2", 15, 30)]
    got = assign_pipelines(shards, "M", [["a0", "b0"], ["a1", "b1"]])
    assert names(got) == [["a0", "b2"], ["a1", "b1"]]
    restarted = [Entry("a0", 0, 15, epoch=2), Entry("b0", 15, 30), Entry("a1", 0, 15),
                 Entry("b1", 15, 30)]
    got = assign_pipelines(restarted, "M", [["a0", "b0"], ["a1", "b1"]])
    assert names(got) == [["a0", "b0"], ["a1", "b1"]] and got[0][0].epoch == 2


def test_uneven_replicas_make_as_many_pipelines_as_the_scarcest_range_allows():
    shards = [Entry("a0", 0, 10), Entry("a1", 0, 10), Entry("a2", 0, 10),
              Entry("b0", 10, 30), Entry("b1", 10, 30), Entry("x", 0, 30, model="other")]
    got = assign_pipelines(shards, "M", [])
    assert names(got) == [["a0", "b0"], ["a1", "b1"]]
    used = [s.name for c in got for s in c]
    assert len(used) == len(set(used))


def test_no_whole_chain_gives_no_pipeline():
    assert assign_pipelines([Entry("a0", 0, 15)], "M", []) == []
    assert assign_pipelines([Entry("a0", 0, 15)], "M", [["a0", "b0"]]) == [None]


def test_the_assignment_key_changes_with_everything_the_assignment_reads():
    # The scheduler answers each step's "which pipeline?" from the last assignment while its key
    # is the same; each change below changes the answer, so each must change the key.
    def entries(**change):
        out = [Entry("s0", 0, 15), Entry("s1", 15, 30)]
        for k, v in change.items():
            setattr(out[1], k, v)
        out[1].__post_init__()
        return out

    key = assignment_key(entries(), "M", [["s0", "s1"]])
    assert key == assignment_key(entries(), "M", [["s0", "s1"]])
    for changed in (assignment_key(entries(epoch=2), "M", [["s0", "s1"]]),
                    assignment_key(entries(state="loading"), "M", [["s0", "s1"]]),
                    assignment_key(entries(b=29), "M", [["s0", "s1"]]),
                    assignment_key(entries(model="other"), "M", [["s0", "s1"]]),
                    assignment_key(entries(), "M", [["s0"]]),
                    assignment_key(entries()[:1], "M", [["s0", "s1"]])):
        assert changed != key
    e = entries()
    e[1].info = wire.evolve(e[1].info, num_pages=32)
    assert assignment_key(e, "M", [["s0", "s1"]]) != key
    assert names(assign_pipelines(entries(), "M", [])) == [["s0", "s1"]]
