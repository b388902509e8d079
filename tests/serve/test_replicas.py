"""Replicas of every range under load: `llmbus up --shards 2` plus a second shard for each of its
two ranges, started by hand (no watcher respawns them), make two pipelines. 8 greedy streams run
over both; one replica is SIGKILLed mid-stream: every answer is still the undisturbed one, the
dead pipeline's sequences moved to the survivor, which served the rest alone, and the
scheduler's status says the dead one is out of rotation and why."""

from __future__ import annotations

import asyncio
import signal

import pytest
import zmq.asyncio

from bus.config import BusConfig
from bus.directory import Directory
from wire.messages.bus import Status
from wire.messages.scheduler import Generate, StatsRequest

from ..bus.procs import Procs, cli, free_port
from .stack import KEYS, Stack, call, generate, status_of, wait_for

pytestmark = pytest.mark.slow

ASKS = ["Name three rivers.", "What is a lighthouse?", "Tell me about trains.",
        "Describe a dragon.", "Why is the sky blue?", "Write about winter.",
        "What do bakers do?", "Say something about the sea."]


def request(i: int) -> Generate:
    # 96 tokens: the test must catch both pipelines streaming at once before the answers end; at 32 the
    # window was ~0.25 s, and a slow CI machine's stats polls missed it
    return Generate(messages=[{"role": "user", "content": ASKS[i]}], temperature=0.0,
                    max_tokens=96, request_id=f"ask-{i}")


@pytest.fixture(scope="module")
def ports() -> list[int]:
    return [free_port(), free_port()]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_path, ports):
    # Every process of the stack takes the replicas' addresses as static peers: once they run,
    # all of them see them.
    s = Stack(tmp_path_factory.mktemp("runtime"), "--shards", "2", "--model", str(model_path),
              "--pages", "256", "--threads", "1",
              extra_env={"LLMBUS_PEERS": ",".join(f"127.0.0.1:{p}" for p in ports)})
    for p in ports:                        # the replicas join with the stack's key
        KEYS[f"tcp://127.0.0.1:{p}"] = s.key
    yield s
    s.close()


async def stats(stack) -> dict:
    return (await call(stack.endpoint, StatsRequest())).stats


async def test_killing_a_replica_under_load_loses_nothing_and_the_survivor_serves_alone(
        stack, model_path, ports):
    undisturbed = await asyncio.gather(*(generate(stack.endpoint, request(i)) for i in range(8)))
    for a in undisturbed:
        assert a.done.finish_reason in ("stop", "length") and len(a.token_ids) > 5, a.done
    first = (await call(stack.endpoint, Status())).info["pipeline"]
    ranges = [(await status_of(stack, name)).info["layers"] for name in first]
    assert len(ranges) == 2
    # What a `busctl monitor scheduler.pipeline` would print.
    watch = Directory(zmq.asyncio.Context.instance(),
                      BusConfig(cluster=stack.info["cluster"], mdns=False,
                                peers=(stack.info["scheduler"],), key=stack.key), me="test-watch")
    events: list = []
    watch.subscribe(b"scheduler.pipeline")
    watch.on_event.append(lambda topic, msg: topic == b"scheduler.pipeline"
                          and events.append(msg.body.data))
    await watch.start()
    procs = Procs()
    try:
        replicas = [procs.start(cli("run", "shard", "--name", f"replica-{i}", "--cluster",
                                    stack.info["cluster"], "--no-mdns", *_peers(stack, ports, port),
                                    "--rpc-port", str(port), "--model", str(model_path),
                                    "--pages", "256", "--threads", "1", "--layers", f"{a}:{b}",
                                    "--key-file", stack.info["key_file"]))
                    for i, (port, (a, b)) in enumerate(zip(ports, ranges))]
        await wait_for(lambda: _pipelines(stack, 2), timeout=120, every=0.2)
        # replica-0 hands batches on to replica-1 only once it sees it live.
        await wait_for(lambda: _sees(ports[0], "replica-1"), timeout=30, every=0.2)
        seen = [0] * 8

        def count(i):
            return lambda n: seen.__setitem__(i, n)

        runs = [asyncio.create_task(generate(stack.endpoint, request(i), on_tokens=count(i)))
                for i in range(8)]
        # Both pipelines stream: then the second one loses its last shard.
        await wait_for(lambda: _both_serving(stack, seen), timeout=60, every=0.05)
        before = await stats(stack)
        replicas[1].send_signal(signal.SIGKILL)
        await asyncio.to_thread(replicas[1].wait, 30)
        # from here on only results replica-1 sent before it died can land: batches in flight now
        at_death = await stats(stack)
        got = await asyncio.gather(*runs)
        after = await stats(stack)
        await wait_for(lambda: _gone(stack, "p1"), timeout=30, every=0.2)
        status = await call(stack.endpoint, Status())
        await wait_for(lambda: any(e["name"] == "p1" and not e["in_rotation"] for e in events),
                       timeout=10)
    finally:
        procs.stop_all()
        await watch.stop()
    assert before["pipelines.p1.running"] > 0 and before["pipelines.p1.batches_done"] > 0
    for i, (want, have) in enumerate(zip(undisturbed, got)):
        assert have.text == want.text and have.token_ids == want.token_ids, f"request {i}"
        assert have.done.finish_reason == want.done.finish_reason
    # The dead pipeline's sequences moved, and the survivor served the rest alone.
    assert after["pipelines.p1.moved_out"] >= 1
    assert after["pipelines.p0.moved_in"] == after["pipelines.p1.moved_out"]
    assert after["pipelines.p0.batches_done"] > before["pipelines.p0.batches_done"]
    # p1 completed no batch it sent after its last shard died: at most those in flight then (a
    # result replica-1 had sent, still on its way; at 14 against 12 + 1 the bound of one failed)
    assert after["pipelines.p1.batches_done"] <= (at_death["pipelines.p1.batches_done"]
                                                  + at_death["pipelines.p1.inflight"])
    assert after.get("finished_failed", 0) == 0
    lanes = {p["name"]: p for p in status.info["pipelines"]}
    assert lanes["p0"]["in_rotation"] and lanes["p0"]["shards"] == first
    assert not lanes["p1"]["in_rotation"] and "replica-1" in lanes["p1"]["why"]
    # The bus heard p1 come into rotation with its shards, and leave it.
    assert any(e["name"] == "p1" and e["in_rotation"] and e["shards"] == ["replica-0", "replica-1"]
               for e in events)


def _peers(stack, ports: list[int], mine: int) -> list[str]:
    """The stack's services and the other replica: static peers (tests run without mDNS)."""
    addrs = [*stack.info["peers"], *(f"127.0.0.1:{p}" for p in ports if p != mine)]
    return [a for addr in addrs for a in ("--peer", addr)]


async def _sees(port: int, whom: str) -> bool:
    return whom in (await call(f"tcp://127.0.0.1:{port}", Status())).info["peers"]


async def _gone(stack, lane: str) -> bool:
    return (await stats(stack))[f"pipelines.{lane}.has_pipeline"] == 0


async def _pipelines(stack, n: int) -> bool:
    return (await stats(stack)).get("pipelines") == n


async def _both_serving(stack, seen: list[int]) -> bool:
    s = await stats(stack)
    return (s["pipelines.p1.running"] > 0 and s["pipelines.p0.running"] > 0
            and min(seen) >= 3)
