"""Which shard processes form the pipeline of a model: a pure choice over directory entries."""

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


def ready_stages(entries: Iterable, model: str) -> tuple[list[Stage], int | None]:
    """The ready shards of `model` as stages, and the model's layer count (None: none ready)."""
    stages, n_layers = [], None
    for e in entries:
        info = e.info
        layers = info.get("layers")
        if e.state != "ready" or info.get("model") != model or not layers or len(layers) != 2:
            continue
        n_layers = info.get("n_layers", n_layers)
        stages.append(Stage(e.name, e.epoch, int(layers[0]), int(layers[1]),
                            int(info.get("num_pages", 0)), int(info.get("page_size", 0))))
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
    ranges = sorted((int(e.info["layers"][0]), int(e.info["layers"][1]), e.info.get("n_layers"))
                    for e in entries if e.state == "ready" and e.info.get("model") == model
                    and len(e.info.get("layers") or ()) == 2)
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
    have = sorted((e.info.get("layers", [None])[0] or 0, e.name, e.state, e.info.get("model") == model)
                  for e in entries)
    if not have:
        return "no shard is live on the bus"
    return "shards seen: " + ", ".join(
        f"{name} layers {e0}: {state}{'' if same else ' (another model)'}"
        for e0, name, state, same in have)
