"""The cluster as `/v1/cluster` and the web page show it: services with the health watchers'
state, hosts, the layer map, each hop's bytes and latency, and the scheduler's requests and KV
pages. Pure: directory entries, the watchers' status replies and the scheduler's stats in, one
JSON-ready dict out (gateway/feed.py does the asking).

A shard that went down leaves the directory once its heartbeats stop; while a watcher still
runs it (down, or starting again) its bar stays on the layer map from what it last told
(`remember`), so that a page sees it go red and come back rather than vanish. A respawn quicker
than the feed's sampling would still pass unseen: `unseen_outages` marks it in the snapshot a
live reader gets next, from the watcher's restart count.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from wire.messages.health import HealthStatusReply
from wire.messages.info import ServiceInfo, info_map

from .health import cluster_view

# What a service is, as the page colours it: serving, up but not progressing, not serving
# (down, being killed, starting again, or its own state not ready), given up.
UP, STALLED, DOWN, FAILED = "up", "stalled", "down", "failed"
# The scheduler's stats the page shows as the cluster's requests and KV pages.
REQUEST_STATS = ("running", "waiting", "inflight_batches", "pages_used", "pages_total",
                 "pages_cached", "page_use", "tokens_per_s", "finished_cancelled")

Remembered = dict[str, tuple[str, ServiceInfo]]   # name -> (kind, last info) of services seen


def remember(memory: Remembered, entries: Iterable, watchers: Sequence[HealthStatusReply]
             ) -> Remembered:
    """What each service last told, kept while it is live or a watcher still runs it."""
    watched = {w.name for reply in watchers for w in reply.services}
    live = {e.name: (e.kind, e.info) for e in entries}
    kept = {n: v for n, v in memory.items() if n in watched and n not in live}
    return {**kept, **live}


def status_of(live_state: str | None, watch_state: str | None) -> str:
    """UP, STALLED, DOWN or FAILED from the directory's state (None: not live) and the state
    its watcher shows (None: no watcher runs it)."""
    if watch_state == "failed":
        return FAILED
    if live_state != "ready" or watch_state in ("down", "killing", "starting"):
        return DOWN
    return STALLED if watch_state == "stalled" else UP


def snapshot(entries: Iterable, now: float, watchers: Sequence[HealthStatusReply],
             stats: dict[str, float], memory: Remembered, me: str = "") -> dict[str, Any]:
    """The cluster view: `health.cluster_view`'s services and layer map, each with its watcher's
    state and restarts, the services a watcher runs that are not live now, hosts, hops and
    requests."""
    entries = list(entries)
    view = cluster_view(entries, now)
    watch = {w.name: {"state": w.state, "restarts": w.restarts, "last_error": w.last_error,
                      "pid": w.pid, "watcher": reply.watcher, "machine": reply.machine}
             for reply in watchers for w in reply.services}
    live = {e.name: e for e in entries}
    for s in view["services"]:
        s["watch"] = watch.get(s["name"])
        s["status"] = status_of(s["state"], (s["watch"] or {}).get("state"))
        e = live[s["name"]]
        s["machine"], s["host"], s["pid"] = e.machine, e.host, e.pid
    for name, w in sorted(watch.items()):
        if name in live or name == me:
            continue
        kind, info = memory.get(name, ("", ServiceInfo()))
        view["services"].append({
            "name": name, "kind": kind, "state": "absent", "watch": w,
            "status": status_of(None, w["state"]), "machine": w["machine"], "host": "",
            "pid": w["pid"], "heartbeat_age_s": None, "info": info_map(info)})
    # The gateway answering this is a service too: listed under its host (from its watcher),
    # apart from `services`, which are its peers on the bus.
    view["self"] = _self(me, watch.get(me))
    view["hosts"] = _hosts(view["services"] + ([view["self"]] if view["self"] else []), watchers)
    view["layer_map"] = _layer_map(view["services"])
    view["n_layers"] = max((s["info"].get("n_layers", 0) for s in view["services"]), default=0)
    view["hops"] = hops(stats)
    view["requests"] = {k: stats[k] for k in REQUEST_STATS if k in stats}
    return view


Shown = dict[str, tuple[int, str]]   # name -> (restarts, status) as a reader last got them


def shown(snap: dict[str, Any]) -> Shown:
    """What a reader was shown of each watched service: its restart count and status."""
    return {s["name"]: (s["watch"]["restarts"], s["status"])
            for s in snap["services"] if s.get("watch")}


def unseen_outages(before: Shown, snap: dict[str, Any]) -> dict[str, Any] | None:
    """`snap` with each service DOWN whose watcher restarted it since the reader was last shown
    it serving, where `snap` shows it serving again (its outage fell between two samples); None
    when there is none. The reader gets this, then the present."""
    names = {s["name"] for s in snap["services"] if s.get("watch")
             and s["status"] in (UP, STALLED) and s["name"] in before
             and before[s["name"]][1] in (UP, STALLED)
             and s["watch"]["restarts"] > before[s["name"]][0]}
    if not names:
        return None
    out = copy.deepcopy(snap)
    for s in out["services"]:
        if s["name"] in names:
            s["status"], s["watch"]["state"] = DOWN, "down"
    for b in out["layer_map"]:
        if b["shard"] in names:
            b["status"], b["watch_state"] = DOWN, "down"
    return out


def _self(me: str, w: dict | None) -> dict | None:
    """This gateway as a service row (up, since it answers; its watcher's state and restarts),
    where a watcher runs it and so names its machine."""
    if not me or w is None:
        return None
    return {"name": me, "kind": "gateway", "state": "ready", "watch": w,
            "status": status_of("ready", w["state"]),
            "machine": w["machine"], "host": "", "pid": w["pid"],
            "heartbeat_age_s": 0.0, "info": {}}


def _hosts(services: list[dict], watchers: Sequence[HealthStatusReply]) -> list[dict]:
    """Machines and the names of their services; a machine's watcher names it."""
    named = {r.machine: r.watcher for r in watchers}
    hosts: dict[str, dict] = {}
    for s in services:
        key = s["machine"] or s["host"] or "?"
        h = hosts.setdefault(key, {"machine": key, "watcher": named.get(key, ""),
                                   "addresses": [], "services": []})
        h["services"].append(s["name"])
        if s["host"] and s["host"] not in h["addresses"]:
            h["addresses"].append(s["host"])
    return sorted(hosts.values(), key=lambda h: h["machine"])


def _layer_map(services: list[dict]) -> list[dict]:
    """One bar per shard over the model's layers (live, or remembered while a watcher runs it),
    in layer order; replicas of a range go to separate lanes, side by side."""
    bars = []
    for s in services:
        if s["kind"] != "shard":
            continue
        layers = list(s["info"].get("layers") or ())
        if not layers:
            continue
        watch = s["watch"] or {}
        bars.append({"layers": layers, "shard": s["name"], "state": s["state"],
                     "model": s["info"].get("model", ""), "status": s["status"],
                     "watch_state": watch.get("state"), "restarts": watch.get("restarts", 0),
                     "kv_pages": s["info"].get("kv_pages", 0), "device": s["info"].get("device", "")})
    bars.sort(key=lambda b: (b["layers"][0], b["shard"]))
    lanes: list[int] = []          # each lane's end so far
    for b in bars:
        lane = next((i for i, end in enumerate(lanes) if end <= b["layers"][0]), len(lanes))
        if lane == len(lanes):
            lanes.append(0)
        lanes[lane] = b["layers"][1]
        b["lane"] = lane
    return bars


def hops(stats: dict[str, float]) -> list[dict]:
    """Each hop of the route (`sender>receiver`) with its bytes, batches and mean one-way
    latency, from the scheduler's `hop.*` totals."""
    out = []
    for key, batches in sorted(stats.items()):
        if not key.startswith("hop.batches."):
            continue
        hop = key.removeprefix("hop.batches.")
        src, _, dst = hop.partition(">")
        n = max(batches, 1.0)
        out.append({"hop": hop, "from": src, "to": dst, "batches": int(batches),
                    "bytes": int(stats.get(f"hop.bytes.{hop}", 0)),
                    "latency_ms": round(stats.get(f"hop.latency_ms.{hop}", 0.0) / n, 3)})
    return out
