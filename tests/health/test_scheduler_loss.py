"""The scheduler's death loses nothing: 12 chats streamed through the gateway live through two
SIGKILLs and a SIGSTOP of the scheduler, greedy and seeded (temperature 0.8), and each ends with
exactly its undisturbed text, every token once (the gateway carries each request to the respawned
scheduler as a continuation; the client sees a pause). A tokenizer killed under 8 new requests
through the gateway loses none of them either. After the drills no shard holds a page of a
scheduler run that is gone. Prints, for each loss, how long after the watcher's respawn the new
scheduler was ready and the first and every stream moved again, and the longest pause a client
saw (the issue's goal: every stream moving again within 3 s of the respawn)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import pytest

from wire.messages.scheduler import StatsRequest

from ..serve.stack import call
from ..waiting import until
from .chaos_watch import Flow, Watch, gone_at
from .chats import TOPICS, assert_undisturbed, chat, model_id

pytestmark = pytest.mark.slow

MAX_TOKENS = 96
DISRUPTIONS = ("kill", "stop", "kill")
SCHEDULER = "scheduler-0"


@pytest.fixture
def stack(up3):
    return up3


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 1234}],
                         ids=["greedy", "seeded"])
async def test_twelve_streams_live_through_two_kills_and_a_stop_of_the_scheduler(stack, sampling):
    model = await model_id(stack.http)
    want = await asyncio.gather(*(chat(stack.http, model, i, sampling, MAX_TOKENS)
                                  for i in range(len(TOPICS))))
    assert all(w.finish == "length" and w.error is None for w in want), \
        [(w.finish, w.error) for w in want]         # each lasts long enough to be disturbed
    report = []
    async with Watch(stack) as watch:
        await until(lambda: watch.directory.get(SCHEDULER), 30, what="the scheduler")
        flow = Flow(len(TOPICS))
        runs = [asyncio.ensure_future(chat(stack.http, model, i, sampling, MAX_TOKENS, flow))
                for i in range(len(TOPICS))]
        await until(lambda: min(flow.counts) >= 2, 120, what="every stream's first tokens")
        for how in DISRUPTIONS:
            assert not any(r.done() for r in runs), "a stream ended before every disruption"
            report.append(await disrupt(watch, flow, how))
        got = await asyncio.wait_for(asyncio.gather(*runs), 300)
        stats = await until(lambda: _settled(watch), 30, what="no page held or leaked")
    pause = max(g.longest_pause() for g in got)
    print("\n" + "\n".join(report) + f"\nlongest pause a client saw: {pause:.2f} s; shards' "
          f"pages: { {k: v for k, v in stats.items() if k.startswith('shard')} }")
    for i, (g, w) in enumerate(zip(got, want)):
        assert_undisturbed(g, w, TOPICS[i])


async def disrupt(watch: Watch, flow: Flow, how: str) -> str:
    """Kill or stop the scheduler, wait until every stream has moved again, and say when each
    step came, counted from the watcher's respawn (the new process's start)."""
    epoch = watch.epoch_of(SCHEDULER)
    pid = await watch.pid_of(SCHEDULER)
    t0 = time.monotonic()
    killed = ""
    if how == "kill":
        os.kill(pid, signal.SIGKILL)
    else:   # stopped until the watcher kills it (SIGCONT after, should it still be there)
        os.kill(pid, signal.SIGSTOP)
        try:
            killed = f"killed by the watcher {await asyncio.wait_for(gone_at(pid), 30) - t0:.2f} s, "
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    ready = await until(lambda: watch.ready_after(SCHEDULER, epoch), 60,
                        what="a new scheduler ready")
    respawned = watch.started_after(SCHEDULER, epoch) or ready
    # Each stream goes on before the next disruption (no token comes from the new scheduler
    # before it is ready; one still on its way from the old one may come after the signal).
    await until(lambda: all(flow.first_of_after(i, ready) for i in range(len(flow.counts))), 60,
                what="every stream's tokens again")
    moved = [flow.first_of_after(i, ready) for i in range(len(flow.counts))]
    return (f"SIG{how.upper()} {SCHEDULER}: {killed}respawned {respawned - t0:.2f} s after the "
            f"signal; after the respawn: ready {ready - respawned:.2f} s, first tokens "
            f"{min(moved) - respawned:.2f} s, every stream moving again "
            f"{max(moved) - respawned:.2f} s")


async def _settled(watch: Watch) -> dict | None:
    """The scheduler's stats once nothing holds a page: no page in use, none waiting or
    running, and no shard holding pages of a scheduler run that is gone."""
    e = watch.directory.get(SCHEDULER)
    if e is None:
        return None
    s = (await call(e.rpc_endpoint, StatsRequest(), timeout=5)).stats
    ok = (s["pages_used"] == 0 and s["running"] == 0 and s["waiting"] == 0
          and s["shards.kv_pages_stale"] == 0 and sum(k.startswith("shard.") for k in s) == 3)
    return s if ok else None


@pytest.mark.timeout(300)
async def test_a_tokenizer_killed_under_eight_new_chats_loses_none(stack):
    model = await model_id(stack.http)
    greedy = {"temperature": 0}
    want = await asyncio.gather(*(chat(stack.http, model, i, greedy, MAX_TOKENS)
                                  for i in range(8)))
    async with Watch(stack) as watch:
        await until(lambda: watch.directory.get("tokenizer-0"), 30, what="the tokenizer")
        epoch, pid = watch.epoch_of("tokenizer-0"), await watch.pid_of("tokenizer-0")
        os.kill(pid, signal.SIGKILL)
        # Sent while it is dead or restarting: their prompts wait for the tokenizer that is next.
        got = await asyncio.wait_for(asyncio.gather(
            *(chat(stack.http, model, i, greedy, MAX_TOKENS) for i in range(8))), 240)
        await until(lambda: watch.ready_after("tokenizer-0", epoch), 60, what="a new tokenizer")
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.error is None and g.finish == w.finish, (TOPICS[i], g.error)
        assert g.tokens == w.tokens and g.text == w.text, TOPICS[i]
