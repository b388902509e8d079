"""A pipeline whose last shard cannot reach the scheduler is refused when it is assembled, with a
reason: the last shard sends every answer straight there (pipelines/reach.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
import zmq.asyncio

from bus.config import ServiceConfig
from bus.directory import Directory
from bus.errors import RemoteError
from bus.liveness import PeerEntry
from services.scheduler.pipelines.chains import Stage
from services.scheduler.pipelines.reach import Reach
from services.scheduler.service import SchedulerService
from wire.messages.info import ShardInfo

from .harness import ManualClock

CHAIN = [Stage("shard-0", 1, 0, 15, 64, 16), Stage("shard-15", 2, 15, 30, 64, 16)]


class Probes:
    """The check of a last shard: fails with `error` while it is set."""

    def __init__(self):
        self.asked: list[tuple[str, int]] = []
        self.error: Exception | None = None

    async def __call__(self, last: Stage) -> None:
        self.asked.append((last.name, last.epoch))
        if self.error is not None:
            raise self.error


async def settled() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_chain_waits_for_its_check_then_serves_and_is_not_checked_again():
    probes, clock = Probes(), ManualClock()
    reach = Reach(probes, clock)
    assert reach.admit([CHAIN, None]) == [None, None]     # held back while checked
    await settled()
    assert reach.admit([CHAIN]) == [CHAIN] and reach.refused() == {}
    assert reach.admit([CHAIN]) == [CHAIN] and probes.asked == [("shard-15", 2)]


async def test_a_last_shard_that_cannot_reach_us_is_refused_with_why_and_checked_again_later():
    probes, clock = Probes(), ManualClock()
    probes.error = RemoteError("not_found", "'scheduler-0' not found: mDNS off; live: none",
                               peer="shard-15")
    reach = Reach(probes, clock, retry_s=5.0, first_retry_s=0.25)
    reach.admit([CHAIN])
    await settled()
    assert reach.admit([CHAIN]) == [None]
    why = reach.refused()["shard-15"]
    assert "shard-15 cannot reach the scheduler" in why and "not_found" in why
    # Checked again after pauses that double, 0.25 s to 5 s: soon after a first refusal (a
    # shard that had not heard of a respawned scheduler yet), rarely for one that stays.
    for pause in (0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0):
        asked = len(probes.asked)
        clock.t += pause * 0.9
        assert reach.admit([CHAIN]) == [None] and len(probes.asked) == asked
        clock.t += pause * 0.1
        assert reach.admit([CHAIN]) == [None]            # checked again now, refused again
        await settled()
        assert len(probes.asked) == asked + 1
    probes.error = None                  # its directory found us meanwhile
    clock.t += 5.0
    assert reach.admit([CHAIN]) == [None]                # checked again now
    await settled()
    assert reach.admit([CHAIN]) == [CHAIN] and reach.refused() == {} and len(probes.asked) == 9


async def test_a_new_epoch_of_the_last_shard_or_a_broken_batch_has_it_checked_again():
    probes, clock = Probes(), ManualClock()
    reach = Reach(probes, clock)
    reach.admit([CHAIN])
    await settled()
    restarted = [CHAIN[0], Stage("shard-15", 3, 15, 30, 64, 16)]
    assert reach.admit([restarted]) == [None]
    await settled()
    reach.forget(restarted[-1])
    assert reach.admit([restarted]) == [None]
    await settled()
    assert probes.asked == [("shard-15", 2), ("shard-15", 3), ("shard-15", 3)]


@pytest.fixture
def ctx():
    c = zmq.asyncio.Context()
    yield c
    c.destroy(linger=0)


def shard(name: str, a: int, b: int, epoch: int) -> PeerEntry:
    return PeerEntry(name=name, kind="shard", instance="0", epoch=epoch, host="127.0.0.1",
                     rpc_port=1, pub_port=2, state="ready",
                     info=ShardInfo(model="M", layers=(a, b), n_layers=30, num_pages=64, page_size=16))


async def test_the_scheduler_assembles_no_pipeline_whose_last_shard_cannot_reach_it(ctx):
    config = ServiceConfig(name="scheduler-0", kind="scheduler", discover=True)
    s = SchedulerService(config, ctx=ctx)
    s.directory = Directory(ctx, config.bus, me=config.name)
    s.model = "M"
    probes = Probes()
    probes.error = RemoteError("not_found", "'scheduler-0' not found", peer="shard-15")
    s.reach = Reach(probes, time.monotonic)
    for e in (shard("shard-0", 0, 15, 1), shard("shard-15", 15, 30, 2)):
        s.directory.table.observe(e, s.directory._now())
    assert s._first_chain() is None
    await settled()
    assert s._first_chain() is None                      # refused, and says why
    assert "shard-15 cannot reach the scheduler" in s.info().refused["shard-15"]
    assert "pipeline refused: shard-15 cannot reach the scheduler" in s._explain()
