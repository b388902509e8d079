"""The order in which a scheduler learns that a range is gone does not matter: the watcher's
`service_failed` event may come while the given-up shard's last heartbeat is still fresh (a
shard that dies at start is given up within a second or two), and then the requests end when
that stale entry expires, not after the unserved budget."""

from __future__ import annotations

import time

import pytest
import zmq.asyncio

import wire
from bus.config import ServiceConfig
from bus.directory import Directory
from bus.liveness import PeerEntry
from services.scheduler.batching import Scheduler
from services.scheduler.pipelines.breaker import Breakers
from services.scheduler.pipelines.failed_ranges import FAILED_TOPIC
from services.scheduler.pipelines.replicas import Pipeline, Pipelines
from services.scheduler.service import SchedulerService
from wire.messages.health import ServiceEvent

from ..scheduler.harness import req, small
from wire.messages.info import ShardInfo


def shard(name: str, a: int, b: int, epoch: int = 1) -> PeerEntry:
    return PeerEntry(name=name, kind="shard", instance="0", epoch=epoch, host="127.0.0.1",
                     rpc_port=1, pub_port=2, state="ready",
                     info=ShardInfo(layers=(a, b), model="M", n_layers=30))


def failed_event(name: str, a: int, b: int) -> wire.Message:
    body = ServiceEvent(kind="service_failed", service=name, reason="3 failures within 60 s",
                        watcher="health-0", machine="m", restarts=2,
                        service_kind="shard", info={"layers": [a, b], "model": "M"})
    return wire.Message(body=body)


@pytest.fixture
def ctx():
    c = zmq.asyncio.Context()
    yield c
    c.destroy(linger=0)


def scheduler_with_one_request(ctx) -> SchedulerService:
    """A scheduler service as on_start leaves it (a directory, one pipeline's policy), with one request."""
    config = ServiceConfig(name="scheduler-0", kind="scheduler", discover=True)
    s = SchedulerService(config, ctx=ctx)
    s.directory = Directory(ctx, config.bus, me=config.name)
    s.model = "M"
    s.pipelines = Pipelines(lambda current: [None] * len(current), None, Breakers(), time.monotonic)
    s.pipelines.pipelines.append(Pipeline("p0", Scheduler(small())))
    s.pipelines.submit(req("r1"))
    assert s.pipelines.is_tracked("r1")
    return s


def ended(s: SchedulerService) -> bool:
    return not s.pipelines.is_tracked("r1")


def test_the_event_before_the_stale_entry_expires_ends_the_requests_when_it_does(ctx):
    s = scheduler_with_one_request(ctx)
    stale = shard("shard-15", 15, 30)
    for e in (shard("shard-0", 0, 15), stale):
        s.directory.table.observe(e, s.directory._now())

    s._on_health_event(FAILED_TOPIC, failed_event("shard-15", 15, 30))
    assert not ended(s)     # its last heartbeat still says it holds 15:30

    del s.directory.table.entries["shard-15"]     # what expiry does
    s._on_peer_expired(stale)
    assert ended(s)


def test_an_expiry_while_a_replica_holds_the_range_ends_nothing(ctx):
    s = scheduler_with_one_request(ctx)
    for e in (shard("shard-0", 0, 15), shard("shard-15b", 15, 30)):
        s.directory.table.observe(e, s.directory._now())
    s._on_health_event(FAILED_TOPIC, failed_event("shard-15", 15, 30))
    s._on_peer_expired(shard("shard-15", 15, 30))
    assert not ended(s)


def test_an_expiry_with_nothing_given_up_ends_nothing(ctx):
    s = scheduler_with_one_request(ctx)
    s.directory.table.observe(shard("shard-0", 0, 15), s.directory._now())
    s._on_peer_expired(shard("shard-15", 15, 30))
    assert not ended(s)


def test_a_served_batch_is_progress_for_the_stall_rule_even_without_a_token(ctx):
    # A long prompt's prefill chunks give no token for many batches; the watcher's stall rule
    # (services/health/policy.py) reads `progress` and must see the scheduler working.
    s = scheduler_with_one_request(ctx)
    pipeline = s.pipelines.pipelines[0]
    s._batch_ended(pipeline, 0.05, "")
    s._batch_ended(pipeline, None, "")
    assert s.progress == 2
    s._batch_ended(pipeline, None, "peer_dead: shard-0")
    assert s.progress == 2
