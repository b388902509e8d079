"""Which shard processes form a model's pipelines: pure choices over directory entries.

A chain is one pipeline's stages, from layer 0 to the last. Replicas (two or more shards for the
same range) make several disjoint chains: each holds its own KV pool (in its own shard
processes), so the sequences placed on one stay on it; a chain that loses a shard is rebuilt from
what is left, or has none (its sequences then move to another). The chains already in use keep
their shards, so that a replica appearing or another chain breaking changes nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    epoch: int
    start: int
    end: int
    num_pages: int
    page_size: int
    kernel: str = ""         # where it computes (ShardInfo.kernel, cores, threads); "": unknown
    cores: int = 0
    threads: int = 0


def ready_stages(entries: Iterable, model: str) -> tuple[list[Stage], int | None]:
    """The ready shards of `model` as stages, and the model's layer count (None: none ready)."""
    stages, n_layers = [], None
    for e in entries:
        info = e.info
        if e.state != "ready" or info.model != model or not info.layers:
            continue
        n_layers = info.n_layers or n_layers
        stages.append(Stage(e.name, e.epoch, *info.layers, info.num_pages, info.page_size,
                            info.kernel, info.cores, info.threads))
    return stages, n_layers


def find_chain(entries: Iterable, model: str, prefer: Sequence[str] = ()) -> list[Stage] | None:
    """Ready shards of `model` whose layer ranges run from 0 to the model's last layer, in order.

    Where two shards hold the same range, the one named in `prefer` (the chain in use) stays, so
    that a replica appearing does not look like a change of pipeline. None if there is a gap.
    """
    return chain_of(*ready_stages(entries, model), prefer)


def chain_of(stages: Iterable[Stage], n_layers: int | None,
             prefer: Sequence[str] = ()) -> list[Stage] | None:
    """`find_chain` over stages already picked out."""
    by_start: dict[int, list[Stage]] = {}
    for s in stages:
        by_start.setdefault(s.start, []).append(s)
    if n_layers is None:
        return None
    chain, at = [], 0
    while at < n_layers:
        options = by_start.get(at)
        if not options:
            return None
        options.sort(key=lambda s: (s.name not in prefer, s.name))
        chain.append(options[0])
        at = options[0].end
    return chain if at == n_layers else None


def signature(chain: Sequence[Stage]) -> tuple[tuple[str, int, int, int], ...]:
    """Names, epochs and ranges: when it changes, some shard restarted or was given another
    range by placement, and the KV cache the batches relied on is gone."""
    return tuple((s.name, s.epoch, s.start, s.end) for s in chain)


def find_gap(entries: Iterable, model: str) -> tuple[int, int | None] | None:
    """The first layer range [start, end) no ready shard of `model` serves; end None when the
    model's layer count is unknown (no shard of it is ready); None when every layer is served."""
    ranges = sorted((*e.info.layers, e.info.n_layers) for e in entries
                    if e.state == "ready" and e.info.model == model and e.info.layers)
    if not ranges:
        return (0, None)
    n_layers = next((n for *_, n in ranges if n), ranges[-1][1])
    at = 0
    for start, end, _ in ranges:
        if start > at:
            return (at, start)
        at = max(at, end)
    return (at, n_layers) if at < n_layers else None


def explain_missing(entries: Iterable, model: str) -> str:
    """Say what is there, for an operator wondering why nothing runs."""
    have = sorted(((e.info.layers or (0,))[0], e.name, e.state, e.info.model == model)
                  for e in entries)
    if not have:
        return "no shard is live on the bus"
    return "shards seen: " + ", ".join(
        f"{name} layers {e0}: {state}{'' if same else ' (another model)'}"
        for e0, name, state, same in have)


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
