"""What the pipeline lacks before it can serve, and the cluster as JSON: pure functions over
directory entries (name, kind, state, info, last_seen)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from wire.messages.info import info_map


def missing(entries: Iterable, model: str | None) -> list[str]:
    """What must still come up before a request can be served; [] when all is there.

    `model` is the identity the tokenizer reported (None: no tokenizer answered yet).
    """
    entries = list(entries)
    ready = [e for e in entries if e.state == "ready"]
    gaps: list[str] = []
    if model is None:
        gaps.append("tokenizer: none has answered yet")
    elif not any(e.kind == "tokenizer" and e.info.model == model for e in ready):
        # The model was learnt once; a tokenizer that is gone since (given up by its watcher,
        # say) fails every chat, so the cluster is not whole.
        seen = [f"{e.name} ({e.state})" for e in entries if e.kind == "tokenizer"]
        gaps.append("tokenizer: none ready" + (f" (seen: {', '.join(seen)})" if seen else ""))
    if not any(e.kind == "scheduler" and (model is None or e.info.model == model)
               for e in ready):
        seen = [f"{e.name} ({e.state})" for e in entries if e.kind == "scheduler"]
        gaps.append("scheduler: none ready" + (f" (seen: {', '.join(seen)})" if seen else ""))
    gaps += layer_gaps([e for e in ready if e.kind == "shard"
                        and (model is None or e.info.model == model)])
    if gaps:   # what will not come back by itself: the services a health watcher gave up
        gaps += [f"{name}: failed, given up by {w.name} ({f.reason})"
                 for w in entries if w.kind == "health" for name, f in sorted(w.info.failed.items())]
    return gaps


def layer_gaps(shards: list) -> list[str]:
    """The layer ranges no ready shard holds, from 0 to the model's last layer."""
    ranges = sorted(e.info.layers for e in shards if e.info.layers)
    n_layers = max((e.info.n_layers for e in shards), default=0)
    if not ranges:
        return ["shards: no ready shard holds any layer"]
    gaps, covered = [], 0
    for start, end in ranges:
        if start > covered:
            gaps.append(f"shards: layers {covered}:{start} are held by no ready shard")
        covered = max(covered, end)
    if n_layers and covered < n_layers:
        gaps.append(f"shards: layers {covered}:{n_layers} are held by no ready shard")
    return gaps


def cluster_view(entries: Iterable, now: float) -> dict[str, Any]:
    """Services with state and heartbeat age, and the layer map (shards in layer order)."""
    entries = sorted(entries, key=lambda e: (e.kind, e.name))
    services = [{"name": e.name, "kind": e.kind, "instance": e.instance, "state": e.state,
                 "epoch": e.epoch, "endpoint": e.rpc_endpoint, "load": e.load,
                 "heartbeat_age_s": round(max(0.0, now - e.last_seen), 3), "info": info_map(e.info)}
                for e in entries]
    layer_map = sorted(({"layers": list(e.info.layers), "shard": e.name, "state": e.state,
                         "model": e.info.model}
                        for e in entries if e.kind == "shard" and e.info.layers),
                       key=lambda s: (s["layers"][0], s["shard"]))
    return {"services": services, "layer_map": layer_map}
