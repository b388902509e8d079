"""A process paused (SIGSTOP) until its peers have taken it for gone, then resumed (SIGCONT) as
the same process, in its epoch: nothing is lost, nothing comes twice.

- A shard kept its KV cache: the request in flight goes on without a re-prefill and ends with its
  undisturbed text.
- The scheduler: the gateway carried each stream in flight as a continuation to the scheduler
  that serves next, which is the same process, still running each request as it was: it refuses
  the continuation as a duplicate, the gateway cancels that run and sends the continuation
  again. Each stream ends with its undisturbed text, every token once, and no page is held after.

No watcher here (a bare stack of `llmbus run` processes), so the pause can outlast its peers'
dead-after window (heartbeat_interval x heartbeat_misses, 1.5 s) without the process being
replaced: under `llmbus up` the watcher kills a process it sees stopped once it has been silent
for HealthConfig.stopped_after (0.5 s), before any peer could take it for gone."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from dataclasses import dataclass

import aiohttp
import pytest

from bus.config import BusConfig
from bus.errors import BusError
from services.health.policy import HealthConfig
from wire.messages.bus import Status
from wire.messages.scheduler import Generate, StatsRequest

from ..bus.procs import ROOT, cli, env, free_port, unique_cluster
from ..serve.stack import call, generate, wait_for
from ..waiting import until
from .chaos_watch import Flow
from .chats import TOPICS, assert_undisturbed, chat, model_id

pytestmark = pytest.mark.slow

SHARDS = ("shard-0", "shard-15")


@dataclass
class Bare:
    endpoint: str                        # the scheduler's
    http: str                            # the gateway's
    procs: dict[str, subprocess.Popen]


@pytest.fixture(scope="module")
def bare(model_path, tmp_path_factory):
    """tokenizer, shards 0:15 and 15:30, scheduler and gateway."""
    ports = {n: free_port() for n in ("tokenizer-0", *SHARDS, "scheduler-0", "gateway-0")}
    http = free_port()
    common = ["--cluster", unique_cluster(), "--no-mdns",
              *[a for p in ports.values() for a in ("--peer", f"127.0.0.1:{p}")]]
    # The drills' long greedy descriptions repeat phrases: none is ended for it here either.
    specs = {"tokenizer-0": ["tokenizer", "--model", str(model_path)],
             "shard-0": ["shard", "--model", str(model_path), "--layers", "0:15"],
             "shard-15": ["shard", "--model", str(model_path), "--layers", "15:30"],
             "scheduler-0": ["scheduler", "--phrase-repeats", "0"],
             "gateway-0": ["gateway", "--http", f"127.0.0.1:{http}"]}
    logs = tmp_path_factory.mktemp("logs")
    started = {}
    try:
        for n, spec in specs.items():   # logs to files: a pipe nobody reads would block them
            with open(logs / f"{n}.log", "w") as out:
                started[n] = subprocess.Popen(
                    cli("run", *spec, "--name", n, "--rpc-port", str(ports[n]), *common),
                    cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT)
        yield Bare(f"tcp://127.0.0.1:{ports['scheduler-0']}", f"http://127.0.0.1:{http}", started)
    finally:
        for p in started.values():
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait(10)


async def ready(endpoint: str) -> bool:
    try:
        return (await call(endpoint, Status(), timeout=1.0)).state == "ready"
    except BusError:
        return False


async def stats(endpoint: str) -> dict:
    return (await call(endpoint, StatsRequest())).stats


async def test_a_shard_paused_past_the_schedulers_window_goes_on_without_a_reprefill(bare):
    endpoint, procs = bare.endpoint, bare.procs
    await wait_for(lambda: ready(endpoint), timeout=180, every=0.2)
    body = Generate(messages=[{"role": "user", "content": "Describe a forest in spring."}],
                    temperature=0.0, max_tokens=40)
    alone = await generate(endpoint, body)
    before = await stats(endpoint)
    victim = procs["shard-15"].pid
    paused = []

    def pause_mid_answer(n_tokens: int) -> None:
        if n_tokens >= 3 and not paused:
            os.kill(victim, signal.SIGSTOP)
            paused.append(n_tokens)

    answer = asyncio.ensure_future(generate(endpoint, body, on_tokens=pause_mid_answer))
    try:
        await wait_for(lambda: asyncio.sleep(0, bool(paused)), timeout=60, every=0.01)

        async def seen_gone() -> bool:       # the scheduler took the stopped shard for gone
            s = await stats(endpoint)
            return s.get("driver.waits.gap", 0) > before.get("driver.waits.gap", 0)
        await wait_for(seen_gone, timeout=30, every=0.05)
    finally:
        os.kill(victim, signal.SIGCONT)
    res = await asyncio.wait_for(answer, 120)
    after = await stats(endpoint)
    assert res.token_ids == alone.token_ids and res.text == alone.text
    assert after.get("driver.recoveries", 0) == before.get("driver.recoveries", 0) == 0
    assert after.get("driver.pipeline_changes", 0) == 0
    # Its KV was kept: the prompt was prefilled once for the undisturbed run and once for this.
    assert after["prefix_query_tokens"] == 2 * res.started.prompt_tokens


async def test_a_scheduler_paused_past_the_gateways_window_loses_nothing(bare):
    await wait_for(lambda: ready(bare.endpoint), timeout=180, every=0.2)
    model = await until(lambda: _model(bare.http), 60, what="the gateway's model")
    greedy, n, max_tokens = {"temperature": 0}, 4, 32
    want = await asyncio.gather(*(chat(bare.http, model, i, greedy, max_tokens) for i in range(n)))
    assert all(w.finish == "length" for w in want)        # each lasts long enough to be paused
    before = await stats(bare.endpoint)
    carried = await _carried(bare.http)
    flow = Flow(n)
    runs = [asyncio.ensure_future(chat(bare.http, model, i, greedy, max_tokens, flow))
            for i in range(n)]
    victim = bare.procs["scheduler-0"].pid
    try:
        await until(lambda: min(flow.counts) >= 2, 120, what="every stream's first tokens")
        os.kill(victim, signal.SIGSTOP)
        # Stopped until the gateway has taken it for gone (past its dead-after window, as
        # heartbeats stopped): every stream is being carried to the scheduler that serves next.
        window = BusConfig().dead_after
        assert HealthConfig().stopped_after < window    # (why no watcher runs here)
        await until(lambda: _carried(bare.http, more_than=carried + n - 1), 10 * window,
                    every=0.1, what="the gateway carrying every stream")
    finally:
        os.kill(victim, signal.SIGCONT)
    got = await asyncio.wait_for(asyncio.gather(*runs), 120)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_undisturbed(g, w, TOPICS[i])
    # Each run the scheduler still had was cancelled when its continuation came, and nothing
    # holds a page after: none in use, and no shard holds pages of a run that is gone.
    after = await until(lambda: _settled(bare.endpoint), 30, what="no page held")
    assert after.get("finished_cancelled", 0) - before.get("finished_cancelled", 0) == n


async def _model(http: str) -> str | None:
    try:
        return await model_id(http)
    except aiohttp.ClientError:       # not listening yet
        return None


async def _carried(http: str, more_than: float = -1.0) -> float | None:
    """The gateway's count of requests carried across the loss of their scheduler; None until
    it is more than `more_than`."""
    async with aiohttp.ClientSession() as s, s.get(http + "/metrics") as r:
        text = await r.text()
    value = next(float(line.split()[1]) for line in text.splitlines()
                 if line.startswith("llmbus_requests_carried_total "))
    return value if value > more_than else None


async def _settled(endpoint: str) -> dict | None:
    s = await stats(endpoint)
    ok = (s["pages_used"] == 0 and s["running"] == 0 and s["waiting"] == 0
          and s["shards.kv_pages_stale"] == 0 and sum(k.startswith("shard.") for k in s) == 2)
    return s if ok else None
