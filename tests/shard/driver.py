"""A test's stand-in for the scheduler: Forward messages along a pipeline of real shard processes,
found on the bus by name, each answered by the last shard straight to this test's own service on
the bus (services.scheduler.pipelines.answers.PipelineClient), as the scheduler's are
(tests/shard/test_shard_processes.py, test_arch_kquant_processes.py)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import numpy as np
import zmq.asyncio

import wire
from bus.client import RpcClient
from bus.config import BusConfig, ServiceConfig
from bus.directory import Directory
from bus.errors import BusError
from services.scheduler.pipelines.answers import PipelineClient
from wire.messages.bus import Status
from wire.messages.sampling import SamplingParams
from wire.messages.shard import Forward, RouteStage

_names = itertools.count()


@contextlib.asynccontextmanager
async def client(cluster: str):
    """This test's own service on the bus (mDNS on loopback, as the shards run)."""
    c = PipelineClient(ServiceConfig(name=f"test-{next(_names)}", kind="client", discover=True,
                                     bus=BusConfig(cluster=cluster, mdns_interfaces=("127.0.0.1",))))
    await c.start()
    try:
        yield c
    finally:
        c.stop()
        await c.shutdown()


class Driver:
    """Plays the scheduler: one sequence at a time, pages 0.. in order, along the shards `names`
    (in layer order) as they are live now."""

    def __init__(self, client: PipelineClient, names: list[str], page_size: int):
        self.client, self.directory = client, client.directory
        self.names, self.page_size = list(names), page_size
        self.batch_id = 0

    async def reached(self) -> "Driver":
        """Once every shard finds this test's service: each may send it an answer or a failure."""
        await asyncio.gather(*(self.client.reached_by(n) for n in self.names))
        return self

    def route(self) -> list[RouteStage]:
        return [RouteStage(name, self.directory.get(name).epoch) for name in self.names]

    async def step(self, ids, start, *, first_layer=0, sampling=None, table=None, rows=None,
                   route=None, **kw):
        """One chunk of one sequence; `rows` overrides its one sampling row (e.g. [] for none)."""
        self.batch_id += 1
        n = len(ids)
        pages = (start + n + self.page_size - 1) // self.page_size
        table = [list(range(pages))] if table is None else table
        body = Forward(batch_id=self.batch_id, first_layer=first_layer,
                       positions=list(range(start, start + n)), query_lens=[n],
                       page_table=table,
                       tokens=wire.Tensor(np.asarray(ids, np.int32)),
                       sampling=[sampling or SamplingParams(temperature=0.0)] if rows is None else rows,
                       steps=[0] if rows is None else [0] * len(rows),
                       route=self.route() if route is None else route, **kw)
        return await self.client.answers.forward(body.route[0].name, body, timeout=60)

    async def teacher_forced(self, chat, steps):
        """Replies (with logits) after the prompt and after each of the first `steps` reference
        tokens of a reference chat."""
        prompt, greedy = chat["prompt_ids"], chat["greedy_ids"][:steps]
        out = [await self.step(prompt, 0, return_logits=True)]
        for i, tok in enumerate(greedy[:-1]):
            out.append(await self.step([tok], len(prompt) + i, return_logits=True))
        return out

    async def token_by_token(self, tokens: list[int]) -> list:
        """Replies, with logits, to token i fed alone at position i after the ones before it:
        teacher forcing on the decode path, each step reading the KV the earlier ones wrote."""
        return [await self.step([t], i, return_logits=True) for i, t in enumerate(tokens)]


async def shards_ready(d: Directory, names, timeout: float = 240.0, procs=None):
    """The entries of the shards `names` once each is ready with its model loaded and sees every
    other live: a shard hands a batch on only to a next stage its own directory knows, and each
    finds the others on its own (mDNS), maybe after this test's directory has. procs (tests.bus.procs
    .Procs): the processes behind them, whose exit fails this at once and whose output (with each
    stack, where one still runs at the timeout) the failure shows."""
    names = set(names)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if procs is not None and procs.exited():
            raise AssertionError(f"a process exited before shards {sorted(names)} were ready:\n"
                                 f"{procs.report()}")
        ready = [e for e in d.of_kind("shard") if e.name in names and e.state == "ready" and e.info.model]
        if len(ready) == len(names) and await _see_each_other(ready, names):
            return ready
        await asyncio.sleep(0.1)
    told = f"\n{procs.report(stacks=True)}" if procs is not None else ""
    raise AssertionError(f"shards {sorted(names)} not ready: {d.explain()}{told}")


async def _see_each_other(entries, names: set) -> bool:
    for e in entries:
        async with RpcClient(zmq.asyncio.Context.instance(), e.rpc_endpoint, name=e.name) as c:
            try:
                seen = set((await c.call(Status(), timeout=2.0)).info.get("peers", ()))
            except BusError:
                return False
        if not names - {e.name} <= seen:
            return False
    return True
