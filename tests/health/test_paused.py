"""A shard paused (SIGSTOP) until the scheduler has taken it for gone, then resumed (SIGCONT)
as the same process, kept its KV cache: the request in flight goes on without a re-prefill and
ends with its undisturbed text. No watcher here (a bare stack of `llmbus run` processes), so
the pause can outlast the scheduler's 1.5 s window without the process being replaced."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import pytest

from bus.errors import BusError
from wire.messages.bus import Status
from wire.messages.scheduler import Generate, StatsRequest

from ..bus.procs import ROOT, cli, env, free_port, unique_cluster
from ..serve.stack import call, generate, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bare(model_path, tmp_path_factory):
    """tokenizer, shards 0:15 and 15:30, scheduler: (scheduler endpoint, {name: process})."""
    ports = {n: free_port() for n in ("tokenizer-0", "shard-0", "shard-15", "scheduler-0")}
    common = ["--cluster", unique_cluster(), "--no-mdns",
              *[a for p in ports.values() for a in ("--peer", f"127.0.0.1:{p}")]]
    specs = {"tokenizer-0": ["tokenizer", "--model", str(model_path)],
             "shard-0": ["shard", "--model", str(model_path), "--layers", "0:15"],
             "shard-15": ["shard", "--model", str(model_path), "--layers", "15:30"],
             "scheduler-0": ["scheduler"]}
    logs = tmp_path_factory.mktemp("logs")
    started = {}
    try:
        for n, spec in specs.items():   # logs to files: a pipe nobody reads would block them
            with open(logs / f"{n}.log", "w") as out:
                started[n] = subprocess.Popen(
                    cli("run", *spec, "--name", n, "--rpc-port", str(ports[n]), *common),
                    cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT)
        yield f"tcp://127.0.0.1:{ports['scheduler-0']}", started
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
    endpoint, procs = bare
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
