"""Which failed shards leave a layer range unserved (the scheduler ends its requests with
`range_failed`), and what the gateway's /health says of them: pure functions over entries."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.health import missing
from services.scheduler.pipelines.failed_ranges import unservable
from wire.messages.info import FailedService, info_map, info_of


@dataclass
class E:
    name: str
    kind: str
    state: str = "ready"
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.info = info_of(self.kind, self.info)   # as a heartbeat's is read


def shard(name, a, b, state="ready", model="M"):
    return E(name, "shard", state, {"layers": [a, b], "model": model, "n_layers": 30})


def failed(a, b, model="M"):
    return FailedService("exited with status 1", "shard", {"layers": [a, b], "model": model})


def test_a_failed_shard_whose_layers_nobody_else_holds_makes_the_model_unservable():
    why = unservable({"shard-15": failed(15, 30)}, [shard("shard-0", 0, 15)], "M")
    assert why.startswith("range_failed: layers 15:30 of M") and "shard-15" in why


def test_a_replica_or_overlapping_holders_keep_it_servable():
    assert unservable({"shard-15": failed(15, 30)},
                      [shard("shard-0", 0, 15), shard("shard-15b", 15, 30)], "M") is None
    assert unservable({"shard-15": failed(15, 30)},
                      [shard("a", 10, 20), shard("b", 20, 30)], "M") is None
    # Part of the range held, part not; a holder that is not ready does not count.
    assert unservable({"shard-15": failed(15, 30)}, [shard("a", 10, 20)], "M") is not None
    assert unservable({"shard-15": failed(15, 30)}, [shard("b", 15, 30, "starting")], "M")


def test_failures_of_another_model_or_without_layers_do_not_count():
    assert unservable({"x": failed(15, 30, model="other")}, [], "M") is None
    assert unservable({"tokenizer-0": FailedService("r", "tokenizer")}, [], "M") is None


def test_health_names_the_failed_service_when_something_is_missing():
    watcher = E("health-0", "health", info={"failed": {"shard-15": info_map(failed(15, 30))}})
    entries = [E("tokenizer-0", "tokenizer", info={"model": "M"}),
               E("scheduler-0", "scheduler", info={"model": "M"}), shard("shard-0", 0, 15), watcher]
    gaps = missing(entries, "M")
    assert "shards: layers 15:30 are held by no ready shard" in gaps
    assert "shard-15: failed, given up by health-0 (exited with status 1)" in gaps
    # Its range served by a replica: nothing is missing, /health is 200 again.
    assert missing([*entries, shard("shard-15b", 15, 30)], "M") == []
