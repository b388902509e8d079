"""Closed-loop load on a scheduler: C clients, each sending its next request when its previous
one ended, timing every token as it arrives; plus the scheduler's own counters.
"""

from __future__ import annotations

import asyncio
import time

from bench.serve_workload import Prompt, RequestTiming, Workload
from wire.messages.scheduler import Done, Generate, Started, StatsRequest, Tokens


async def run_level(endpoint: str, prompts: list[Prompt], concurrency: int,
                    workload: Workload, key=None) -> list[RequestTiming]:
    """Client i sends prompts i, i+C, i+2C...; returns the timings of every request (a
    stack with a CURVE key is called with `key`)."""
    import zmq.asyncio

    from bus.client import RpcClient

    ctx = zmq.asyncio.Context.instance()
    client = RpcClient(ctx, endpoint, sender="bench", key=key)
    timings: list[RequestTiming] = []

    async def one_client(i: int) -> None:
        for p in prompts[i::concurrency]:
            t = RequestTiming(sent=time.perf_counter())
            timings.append(t)
            try:
                await one_request(client, p, workload, t)
            except Exception as e:  # a refused or failed request is counted, not fatal
                t.error = f"{type(e).__name__}: {e}"

    try:
        await asyncio.gather(*(one_client(i) for i in range(concurrency)))
    finally:
        await client.close()
    return timings


async def one_request(client, prompt: Prompt, workload: Workload, t: RequestTiming) -> None:
    """One greedy request on the bus, its tokens timed into `t` as they arrive."""
    body = Generate(messages=prompt.messages, max_tokens=workload.max_tokens, temperature=0.0,
                    seed=workload.seed, format=workload.format)
    async for ev in client.stream(body, idle_timeout=120):
        if isinstance(ev, Tokens):
            t.tokens(time.perf_counter(), len(ev.token_ids))
        elif isinstance(ev, Started):
            t.prompt_tokens = ev.prompt_tokens
        elif isinstance(ev, Done):
            t.finish = ev.finish_reason


async def scheduler_stats(endpoint: str, key=None) -> dict[str, float]:
    """The scheduler's counters now (`scheduler.stats`)."""
    import zmq.asyncio

    from bus.client import RpcClient

    client = RpcClient(zmq.asyncio.Context.instance(), endpoint, sender="bench", key=key)
    try:
        reply = await client.call(StatsRequest(), timeout=10)
    finally:
        await client.close()
    return dict(reply.stats)


def stats_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the scheduler did between two snapshots: batches and tokens per batch."""
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in (
        "batches", "tokens_computed", "preemptions", "driver.batches_done",
        "driver.decode_batches", "driver.decode_compute_ms")}
    d["tokens_per_batch"] = d["tokens_computed"] / d["batches"] if d["batches"] else 0.0
    return d
