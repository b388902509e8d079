"""The cluster view the page shows (gateway.cluster), from directory entries, the health
watchers' status and the scheduler's stats: pure, no processes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gateway.cluster import (DOWN, FAILED, STALLED, UP, hops, remember, shown, snapshot,
                             status_of, unseen_outages)
from bus.errors import BusError
from gateway.feed import ClusterFeed
from wire.messages.health import HealthStatusReply, Watched

from ..gateway.test_policy import Entry as DirectoryEntry


@dataclass
class Entry(DirectoryEntry):
    """A directory entry with where it runs."""
    machine: str = "m1"
    host: str = "127.0.0.1"
    pid: int = 100


def shard(name, a, b, n=30):
    return Entry(name, "shard", info={"layers": [a, b], "n_layers": n, "model": "m"})


def watcher(*services):
    return HealthStatusReply(watcher="health-m1", machine="m1", mode="children", services=[
        Watched(name=n, state=s, restarts=r, last_error="", pid=7, unit="") for n, s, r in services])


def test_status_follows_the_watcher_first_then_the_directory():
    assert status_of("ready", "up") == UP and status_of("ready", None) == UP
    assert status_of("ready", "stalled") == STALLED
    assert status_of("ready", "starting") == DOWN       # an old entry of a respawning shard
    assert status_of("loading", "up") == DOWN
    assert status_of(None, "down") == DOWN
    assert status_of(None, "failed") == FAILED


def test_a_shard_that_went_down_keeps_its_bar_red_until_it_serves_again():
    a, b = shard("shard-0", 0, 15), shard("shard-15", 15, 30)
    sched = Entry("scheduler-0", "scheduler", info={"model": "m"})
    memory = remember({}, [a, b, sched], [])
    view = snapshot([a, b, sched], 1.0, [watcher(("shard-0", "up", 0), ("shard-15", "up", 0))], {},
                    memory)
    assert [(x["shard"], x["status"]) for x in view["layer_map"]] == [("shard-0", UP), ("shard-15", UP)]
    assert view["n_layers"] == 30

    # Killed: its heartbeats stopped and the directory forgot it; its watcher starts it again.
    w = watcher(("shard-0", "up", 0), ("shard-15", "starting", 1))
    memory = remember(memory, [a, sched], [w])
    view = snapshot([a, sched], 2.0, [w], {}, memory)
    bar = view["layer_map"][1]
    assert (bar["shard"], bar["layers"], bar["status"], bar["restarts"]) == ("shard-15", [15, 30], DOWN, 1)
    gone = next(s for s in view["services"] if s["name"] == "shard-15")
    assert gone["state"] == "absent" and gone["heartbeat_age_s"] is None and gone["kind"] == "shard"

    # Back, under a new epoch.
    back = shard("shard-15", 15, 30)
    w = watcher(("shard-0", "up", 0), ("shard-15", "up", 1))
    view = snapshot([a, back, sched], 3.0, [w], {}, remember(memory, [a, back, sched], [w]))
    assert [x["status"] for x in view["layer_map"]] == [UP, UP]

    # A service no watcher runs any more and that is not live is forgotten.
    assert "shard-15" not in remember(memory, [a], [watcher(("shard-0", "up", 0))])


def test_a_respawn_between_two_samples_is_shown_down_once_then_up():
    a, b = shard("shard-0", 0, 15), shard("shard-15", 15, 30)
    entries = [a, b]

    def view(restarts, state="up"):
        w = watcher(("shard-0", "up", 0), ("shard-15", state, restarts))
        return snapshot(entries, 0.0, [w], {}, remember({}, entries, [w]))

    before = shown(view(0))
    assert unseen_outages(before, view(0)) is None
    assert unseen_outages(before, view(1, "starting")) is None    # the outage itself shows
    missed = unseen_outages(before, view(1))
    assert [(x["shard"], x["status"], x["watch_state"], x["restarts"]) for x in missed["layer_map"]] \
        == [("shard-0", UP, "up", 0), ("shard-15", DOWN, "down", 1)]
    row = next(s for s in missed["services"] if s["name"] == "shard-15")
    assert (row["status"], row["watch"]["state"]) == (DOWN, "down")
    assert view(1)["layer_map"][1]["status"] == UP                # the present, untouched
    # Once shown down (caught by a sample or by this), coming back is just a change.
    assert unseen_outages(shown(view(1, "starting")), view(1)) is None
    assert unseen_outages(shown(missed), view(1)) is None


class Directory:
    me = "gateway-0"

    def live(self):
        return [shard("shard-0", 0, 30), Entry("health-m1", "health")]


class Peers:
    """The watcher's replies, one per call: up, no answer in time (it was busy respawning), then
    up again after a restart (the respawn fell between two samples), then the same."""

    def __init__(self):
        self.replies = [watcher(("shard-0", "up", 0)), None] + [watcher(("shard-0", "up", 1))] * 3

    async def call(self, name, msg, timeout):
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if reply is None:
            raise BusError("no answer")
        return reply


def test_the_live_feed_never_lets_a_restart_pass_unseen():
    async def stats():
        return {}

    async def main():
        feed = ClusterFeed(Directory(), Peers(), stats, dict, period=0.0, every=60.0)
        got = []
        async for snap in feed.changes():
            got.append((snap["layer_map"][0]["status"], snap["layer_map"][0]["restarts"]))
            if len(got) == 4:
                feed.stopping = True
        return got
    # Without the watcher's answer the directory's "ready" shows; the restart it then tells
    # shows down once all the same.
    assert asyncio.run(asyncio.wait_for(main(), 10)) == [(UP, 0), (UP, 0), (DOWN, 1), (UP, 1)]


def test_replicas_of_a_range_go_to_lanes_side_by_side():
    entries = [shard("a0", 0, 15), shard("a1", 15, 30), shard("b0", 0, 10), shard("b1", 10, 30)]
    view = snapshot(entries, 0.0, [], {}, remember({}, entries, []))
    assert {x["shard"]: x["lane"] for x in view["layer_map"]} == {"a0": 0, "a1": 0, "b0": 1, "b1": 1}


def test_hosts_group_services_by_machine_and_list_the_gateway_itself_apart_from_its_peers():
    entries = [shard("s0", 0, 30), Entry("tok", "tokenizer", machine="m2", host="10.0.0.2")]
    w = watcher(("s0", "up", 0), ("gateway-0", "up", 2), ("tok", "up", 0))
    view = snapshot(entries, 0.0, [w], {}, remember({}, entries, [w]), me="gateway-0")
    assert [(h["machine"], h["services"], h["watcher"]) for h in view["hosts"]] == [
        ("m1", ["s0", "gateway-0"], "health-m1"), ("m2", ["tok"], "")]
    assert all(s["name"] != "gateway-0" for s in view["services"])
    me = view["self"]
    assert (me["name"], me["kind"], me["status"], me["watch"]["restarts"]) == \
        ("gateway-0", "gateway", UP, 2)


def test_hops_and_requests_come_from_the_schedulers_stats():
    stats = {"hop.batches.scheduler-0>s0": 4.0, "hop.bytes.scheduler-0>s0": 400.0,
             "hop.latency_ms.scheduler-0>s0": 2.0, "hop.batches.s0>s1": 4.0,
             "hop.bytes.s0>s1": 4096.0, "hop.latency_ms.s0>s1": 6.0,
             "running": 1.0, "waiting": 0.0, "pages_used": 3.0, "pages_total": 64.0, "other": 1.0}
    assert hops(stats) == [
        {"hop": "s0>s1", "from": "s0", "to": "s1", "batches": 4, "bytes": 4096, "latency_ms": 1.5},
        {"hop": "scheduler-0>s0", "from": "scheduler-0", "to": "s0", "batches": 4, "bytes": 400,
         "latency_ms": 0.5}]
    view = snapshot([], 0.0, [], stats, {})
    assert view["requests"] == {"running": 1.0, "waiting": 0.0, "pages_used": 3.0, "pages_total": 64.0}
