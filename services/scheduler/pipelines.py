"""Replicas as pipelines: the live shards of a model cut into disjoint chains. Pure.

Each chain holds its own KV pool (in its own shard processes), so the sequences placed on one
stay on it; a chain that loses a shard is rebuilt from what is left, or has none (its sequences
then move to another). The chains already in use keep their shards, so that a replica appearing
or another chain breaking changes nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .pipeline import Stage, chain_of, ready_stages


def assignment_key(entries: Iterable, model: str, current: Sequence[Sequence[str]]) -> tuple:
    """Everything `assign_pipelines` reads, as one hashable value: equal keys, equal answers.
    A driver asks for its pipeline at every step; the answer changes only with the directory."""
    stages, n_layers = ready_stages(entries, model)
    return tuple(stages), n_layers, tuple(tuple(names) for names in current)


def assign_pipelines(entries: Iterable, model: str,
                     current: Sequence[Sequence[str]]) -> list[list[Stage] | None]:
    """One chain (or None) for each pipeline now in use, named by its shards in `current`, then
    a new one for each further chain the unused shards make. No shard is in two chains."""
    stages, n_layers = ready_stages(entries, model)
    free = {s.name: s for s in stages}
    out: list[list[Stage] | None] = [None] * len(current)

    def take(prefer: Sequence[str]) -> list[Stage] | None:
        chain = chain_of(free.values(), n_layers, prefer)
        if chain is not None:
            for s in chain:
                del free[s.name]
        return chain

    # First the pipelines whose shards are all still there, as they were...
    for i, names in enumerate(current):
        if names and all(n in free for n in names):
            chain = chain_of(free.values(), n_layers, names)
            if chain is not None and [s.name for s in chain] == list(names):
                out[i] = take(names)
    # ... then the broken ones, from what is left (a replica of the lost range takes its place)...
    for i, names in enumerate(current):
        if out[i] is None:
            out[i] = take(names)
    # ... and any further whole chain is a new pipeline.
    while (chain := take(())) is not None:
        out.append(chain)
    return out
