"""Chaos on `llmbus up --shards 3`: 12 greedy streams live through three SIGKILLs of random
(seeded) shards and a 5 s SIGSTOP, each while the streams run; every request completes with
exactly its undisturbed text. Prints how fast each disruption was noticed and recovered."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time

import pytest

from wire.messages.scheduler import Generate, StatsRequest

from ..serve.stack import call, generate
from ..waiting import until
from .chaos_watch import Flow, Watch, gone_at

pytestmark = pytest.mark.slow

TOPICS = ["the sea", "a mountain village", "winter in a city", "an old library", "a desert road",
          "a rainy harbour", "a garden at night", "a train journey", "a market at dawn",
          "a lighthouse", "a river in autumn", "a snowy forest"]
MAX_TOKENS = 48
DISRUPTIONS = ("kill", "kill", "stop", "kill")     # the drill: SIGSTOP third
STOP_S = 5.0


@pytest.fixture
def stack(up3):
    return up3


def bodies() -> list[Generate]:
    return [Generate(messages=[{"role": "user", "content": f"Write a long, detailed description "
                                                          f"of {topic}."}],
                     temperature=0.0, max_tokens=MAX_TOKENS) for topic in TOPICS]


async def test_twelve_streams_live_through_three_kills_and_a_stop_with_their_undisturbed_text(stack):
    undisturbed = await asyncio.gather(*(generate(stack.endpoint, b) for b in bodies()))
    assert all(r.done.finish_reason == "length" for r in undisturbed), \
        [r.done.finish_reason for r in undisturbed]        # each lasts long enough to be disturbed
    rng = random.Random(13)
    report = []
    async with Watch(stack) as watch:
        await until(lambda: len(watch.directory.of_kind("shard")) == 3, 30, what="3 shards")
        shards = sorted(e.name for e in watch.directory.of_kind("shard"))
        flow = Flow(len(TOPICS))
        runs = [asyncio.ensure_future(generate(stack.endpoint, b, on_tokens=flow.saw(i)))
                for i, b in enumerate(bodies())]
        await until(lambda: min(flow.counts) >= 2, 120, what="every stream's first tokens")
        for kind in DISRUPTIONS:
            assert not any(r.done() for r in runs), "a stream ended before every disruption"
            victim = rng.choice(shards)
            report.append(await (kill if kind == "kill" else stop)(watch, flow, victim))
            # Tokens flow again for everyone before the next disruption (streams still running).
            again = flow.total()
            await until(lambda: flow.total() >= again + len(TOPICS), 60, what="tokens again")
        results = await asyncio.wait_for(asyncio.gather(*runs), 180)
    stats = (await call(stack.endpoint, StatsRequest())).stats
    print("\n" + "\n".join(report))
    print(f"scheduler: recoveries {stats.get('driver.recoveries')}, pipeline changes "
          f"{stats.get('driver.pipeline_changes')}, batch errors "
          f"{ {k[20:]: v for k, v in stats.items() if k.startswith('driver.batch_errors.')} }")
    # Each disruption lost one epoch of one shard (the stopped one was killed): one recovery
    # each, however many batches and retries noticed it.
    assert stats["driver.recoveries"] == len(DISRUPTIONS)
    for i, (got, want) in enumerate(zip(results, undisturbed)):
        assert got.done is not None and got.done.finish_reason == want.done.finish_reason, \
            (TOPICS[i], got.done)
        assert got.token_ids == want.token_ids and got.text == want.text, TOPICS[i]


async def kill(watch: Watch, flow: Flow, victim: str) -> str:
    epoch = watch.epoch_of(victim)
    pid = await watch.pid_of(victim)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    noticed = await until(lambda: watch.noticed_after(t0), 30, what=f"the scheduler noticing {victim}")
    flowing = await until(lambda: flow.first_after(noticed), 60, what="tokens after the kill")
    # The watch hears heartbeats on its own sockets and polls counters every 20 ms: tokens can
    # flow before it has heard the new process ready or seen the recovery counter move.
    ready = watch.ready_after(victim, epoch)
    refill = watch.recovered_after(t0)
    started = watch.started_after(victim, epoch)
    return (f"SIGKILL {victim}: noticed after {noticed - t0:.2f} s, new process started after "
            f"{since(started, t0)}, ready after {since(ready, t0)}, re-prefill from "
            f"{since(refill, t0)}, tokens again after {flowing - t0:.2f} s")


def since(t: float | None, t0: float) -> str:
    return f"{t - t0:.2f} s" if t is not None else "(not seen yet)"


async def stop(watch: Watch, flow: Flow, victim: str) -> str:
    """SIGSTOP for STOP_S (SIGCONT after it, if the watcher has not killed it by then)."""
    epoch = watch.epoch_of(victim)
    pid = await watch.pid_of(victim)
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    dead = asyncio.ensure_future(gone_at(pid))
    try:
        killed = await asyncio.wait_for(asyncio.shield(dead), STOP_S)
    except asyncio.TimeoutError:
        killed = None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        dead.cancel()
    assert killed is not None, f"{victim} stayed stopped for {STOP_S} s: nothing killed it"
    last = watch.last_heartbeat(victim, epoch)
    back = await until(lambda: watch.first_heartbeat_after(victim, epoch), 30,
                       what=f"a new {victim} heartbeating")
    flowing = await until(lambda: flow.first_after(back), 60, what="tokens after the respawn")
    started = watch.started_after(victim, epoch)
    return (f"SIGSTOP {victim}: after its last heartbeat: killed {killed - last:.2f} s, new "
            f"process started {since(started, last)}, heard {back - last:.2f} s "
            f"(killed {killed - t0:.2f} s after SIGSTOP), tokens again {flowing - t0:.2f} s "
            f"after SIGSTOP")
