"""How many micro-batches a pipeline keeps in flight: a pure choice over its stages.

Micro-batches in flight let the stages compute at once: while the last stage runs one, the first
already runs the next. That only pays where the stages have cores of their own. Shards that run
under one kernel (several shards of `llmbus up --shards N`, or hosts that are network namespaces
of one machine) share its cores: as many of them compute at once as its cores hold their threads,
and a micro-batch more only splits the sequences into smaller batches that each read all the
weights again and fight for the same cores. Measured at 8B over 3 namespace hosts of one 2-core
machine, 2 threads a shard, concurrency 8: 15.0 tok/s with 1 in flight, 12.3 with 2, 7.3 with 4
(bench/rpc_compare.py --inflight).

Where stages compute at once, one micro-batch more: the scheduler's turn between two steps
(results back, the next batch planned and sent) and the hops then overlap a step instead of
idling a stage. Where only one stage computes at a time, no more: the second micro-batch would
compute beside the first on the same cores, and costs far more than the turn it hides (the same
8B run at concurrency 8 over 3 namespace hosts: 15.0 tok/s with 1 in flight against 12.3 with 2).
"""

from __future__ import annotations

from collections.abc import Sequence

from .chains import Stage


def micro_batches(chain: Sequence[Stage]) -> int:
    """Micro-batches to keep in flight over `chain`: the stages that can compute at once, plus one
    where that is more than one. Stages that do not tell where they run count as each on a
    machine of its own."""
    shared: dict[str, list[Stage]] = {}
    at_once = 0
    for s in chain:
        if s.kernel and s.cores > 0:
            shared.setdefault(s.kernel, []).append(s)
        else:
            at_once += 1
    for stages in shared.values():
        cores = min(s.cores for s in stages)
        threads = max(max(1, s.threads) for s in stages)
        at_once += min(len(stages), max(1, cores // threads))
    return at_once + 1 if at_once > 1 else 1
