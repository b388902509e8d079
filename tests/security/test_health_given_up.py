"""Finding: six `busctl kill` calls made the watcher give the tokenizer up; every chat was 503
while /health answered 200 "ok". /health is 503 now while a service the pipeline needs is
gone, naming what the watcher gave up."""

from __future__ import annotations

from bus.liveness import PeerEntry
from gateway.health import missing
from wire.messages.info import (FailedService, HealthInfo, SchedulerInfo, ShardInfo,
                                TokenizerInfo)

MODEL = "bded28379082ba5eb9474777d3d1e2f0"


def entry(name: str, kind: str, info, port: int) -> PeerEntry:
    return PeerEntry(name=name, kind=kind, instance=name, epoch=1, host="127.0.0.1",
                     rpc_port=port, pub_port=port + 1, state="ready", info=info)


def cluster(*extra: PeerEntry) -> list[PeerEntry]:
    return [entry("scheduler-0", "scheduler", SchedulerInfo(model=MODEL), 7000),
            entry("shard-0", "shard", ShardInfo(model=MODEL, layers=(0, 30), n_layers=30), 7002),
            *extra]


def test_health_is_503_naming_a_given_up_tokenizer():
    watcher = entry("health-a", "health", HealthInfo(failed={"tokenizer-0": FailedService(
        reason="restarted 5 times in 60 s", kind="tokenizer")}), 7004)
    gaps = missing(cluster(watcher), MODEL)       # the model was learnt before it went
    assert any(g.startswith("tokenizer: none ready") for g in gaps)
    assert any("tokenizer-0: failed, given up by health-a" in g for g in gaps)


def test_a_whole_cluster_is_healthy():
    tok = entry("tokenizer-0", "tokenizer", TokenizerInfo(model=MODEL, vocab_size=49152), 7006)
    assert missing(cluster(tok), MODEL) == []
