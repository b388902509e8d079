"""Micro-batches in flight: one per stage that can compute at once, plus one where that is more
than one (pipelines/overlap.py)."""

from services.scheduler.pipelines.chains import Stage
from services.scheduler.pipelines.overlap import micro_batches


def stage(i: int, kernel: str = "", cores: int = 0, threads: int = 0) -> Stage:
    return Stage(f"shard-{i}", 1, 10 * i, 10 * i + 10, 64, 16, kernel, cores, threads)


def test_stages_that_do_not_tell_where_they_run_each_count_as_a_machine():
    assert micro_batches([stage(0)]) == 1
    assert micro_batches([stage(i) for i in range(3)]) == 4


def test_each_stage_on_its_own_machine_computes_at_once_with_the_others():
    assert micro_batches([stage(i, f"k{i}", 2, 2) for i in range(3)]) == 4


def test_stages_on_one_machine_compute_at_once_only_as_far_as_its_cores_hold_their_threads():
    # three namespace hosts of one 2-core machine, 2 threads a shard: one computes at a time, and
    # a second micro-batch would only compute beside it
    assert micro_batches([stage(i, "k", 2, 2) for i in range(3)]) == 1
    # `llmbus up --shards 3` on 2 cores: 1 thread a shard, two compute at once
    assert micro_batches([stage(i, "k", 2, 1) for i in range(3)]) == 3
    # 16 cores hold three shards of 4 threads
    assert micro_batches([stage(i, "k", 16, 4) for i in range(3)]) == 4
    # a shard with more threads than cores still computes
    assert micro_batches([stage(0, "k", 2, 8)]) == 1
    assert micro_batches([stage(0, "k", 2, 8), stage(1, "j", 2, 8)]) == 3


def test_machines_add_up():
    chain = [stage(0, "a", 2, 2), stage(1, "a", 2, 2), stage(2, "b", 8, 2), stage(3, "b", 8, 2), stage(4)]
    assert micro_batches(chain) == 1 + 2 + 1 + 1
