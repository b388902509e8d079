"""A second shard for a range already served joins a running `llmbus up --shards 3`: every answer
in flight and after is the undisturbed one, since every batch takes the scheduler's route."""

from __future__ import annotations

import asyncio

import pytest

from wire.messages.bus import Status
from wire.messages.scheduler import Generate, StatsRequest

from ..bus.procs import Procs, cli, free_port
from .stack import KEYS, Stack, call, generate, status_of, wait_for

pytestmark = pytest.mark.slow

ASKS = ["Write a long story about a lighthouse keeper.",
        "Describe a long journey by train across a continent.",
        "Tell me a long tale about a dragon and a baker.",
        "Write a long letter to a friend about winter."]


def request(i: int) -> Generate:
    return Generate(messages=[{"role": "user", "content": ASKS[i]}], temperature=0.0, max_tokens=100)


@pytest.fixture(scope="module")
def extra_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_path, extra_port):
    # Every process of the stack also takes the extra shard's address as a static peer (the
    # environment's peers come before `--peer`'s): once it runs, all of them see it.
    s = Stack(tmp_path_factory.mktemp("runtime"), "--shards", "3", "--model", str(model_path),
              extra_env={"LLMBUS_PEERS": f"127.0.0.1:{extra_port}"})
    KEYS[f"tcp://127.0.0.1:{extra_port}"] = s.key     # the extra shard joins with the stack's key
    yield s
    s.close()


async def stats(stack) -> dict:
    return (await call(stack.endpoint, StatsRequest())).stats


async def test_a_second_shard_for_a_served_range_changes_no_answer(stack, model_path, extra_port):
    alone = [await generate(stack.endpoint, request(i)) for i in range(len(ASKS))]
    for a in alone:
        assert a.done.finish_reason in ("stop", "length") and len(a.token_ids) > 20, a.done
    before = _errors(await stats(stack))
    peers = [a for p in stack.info["peers"] for a in ("--peer", p)]
    procs = Procs()
    try:
        in_flight = [asyncio.create_task(generate(stack.endpoint, request(i))) for i in range(len(ASKS))]
        await wait_for(lambda: _running(stack), timeout=30)
        procs.start(cli("run", "shard", "--name", "shard-13b", "--cluster", stack.info["cluster"],
                        "--no-mdns", *peers, "--rpc-port", str(extra_port), "--model", str(model_path),
                        "--layers", "13:25", "--key-file", stack.info["key_file"]))
        # Ready, holding layers 13:25 of the model, and seen so by shard-0, which hands batches on
        # to a holder of layers from 13: the old code picked the least loaded, this idle newcomer.
        await wait_for(lambda: _extra_ready(extra_port), timeout=120, every=0.2)
        await wait_for(lambda: _sees(stack, "shard-0", "shard-13b"), timeout=30, every=0.2)
        still = (await stats(stack))["running"]
        after = [asyncio.create_task(generate(stack.endpoint, request(i))) for i in range(len(ASKS))]
        during, later = await asyncio.gather(*in_flight), await asyncio.gather(*after)
        extra = await call(f"tcp://127.0.0.1:{extra_port}", Status())
    finally:
        procs.stop_all()
    assert still > 0, "every answer ended before the extra shard joined: nothing was in flight"
    for i, (a, d, l) in enumerate(zip(alone, during, later)):
        for got, when in ((d, "in flight"), (l, "after")):
            assert got.token_ids == a.token_ids and got.text == a.text, f"request {i} {when}"
            assert got.done.finish_reason == a.done.finish_reason
    # Nothing was lost, so no batch failed and nothing was recovered; the newcomer ran no batch.
    assert _errors(await stats(stack)) == before, stack.drain_output()[-6000:]
    assert extra.counters.get("forwards", 0) == 0, extra.counters


def _errors(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k.startswith("driver.batch_errors") or "recover" in k}


async def _running(stack) -> bool:
    return (await stats(stack))["running"] > 0


async def _extra_ready(port: int) -> bool:
    try:
        reply = await call(f"tcp://127.0.0.1:{port}", Status(), timeout=1.0)
    except Exception:   # not bound yet
        return False
    return reply.state == "ready" and reply.info.get("layers") == [13, 25] and "model" in reply.info


async def _sees(stack, who: str, whom: str) -> bool:
    return whom in (await status_of(stack, who)).info["peers"]
