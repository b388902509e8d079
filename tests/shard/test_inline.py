"""Where a shard runs a batch: a decode step of a few tokens on its event loop's thread (no hand-off
to the compute thread and back) while such steps are short, a prompt on the compute thread, and
never two batches at once."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import numpy as np
import pytest

import wire
from bus.config import BusConfig, ServiceConfig
from services.scheduler.pipelines.answers import PipelineClient
from services.shard.service import INLINE_MAX_S, INLINE_TOKENS, ShardConfig, ShardService
from wire.messages.sampling import SamplingParams
from wire.messages.shard import Forward, RouteStage

from ..bus.procs import free_port
from ..bus.serving import running

pytestmark = pytest.mark.slow


def forward(s: ShardService, batch_id: int, ids: list[int], start: int, first_page: int) -> Forward:
    n = len(ids)
    pages = (start + n + 15) // 16
    return Forward(batch_id=batch_id, first_layer=0,
                   positions=list(range(start, start + n)), query_lens=[n],
                   page_table=[list(range(first_page, first_page + pages))],
                   tokens=wire.Tensor(np.asarray(ids, np.int32)),
                   sampling=[SamplingParams(temperature=0.0)], steps=[0],
                   route=[RouteStage(s.name, s.epoch)])


@contextlib.asynccontextmanager
async def called_shard(model_path, name: str):
    """A shard of the whole model on the bus, and `c.call` of it, answered by its result straight
    to this test's own service (as the scheduler's calls are)."""
    ports = free_port(), free_port()        # the shard's, and this test's (its answers come here)
    bus = BusConfig(mdns=False, peers=tuple(f"127.0.0.1:{p}" for p in ports))
    shard = ShardService(ServiceConfig(name=name, kind="shard", bus=bus, rpc_port=ports[0], discover=True),
                         ShardConfig(model=model_path, start=0, end=30, num_pages=32))
    me = PipelineClient(ServiceConfig(name=f"{name}-test", kind="client", bus=bus, rpc_port=ports[1],
                                      discover=True))
    async with running(shard) as s, running(me):
        await me.reached_by(s.name)

        class c:
            @staticmethod
            async def call(body, timeout):
                return await me.answers.forward(s.name, body, timeout)
        yield s, c


async def test_decodes_run_on_the_loop_prompts_on_the_compute_thread_one_at_a_time(model_path):
    async with called_shard(model_path, "inline") as (s, c):
        runs: list[tuple[int, int]] = []           # (tokens, thread) of each batch run
        active, most = 0, 0
        inner = s.model.forward

        def watched(batch, **kw):
            nonlocal active, most
            active += 1
            most = max(most, active)
            try:
                time.sleep(0.05)                  # long enough for a second batch to arrive
                return inner(batch, **kw)
            finally:
                active -= 1
                runs.append((batch.num_tokens, threading.get_ident()))

        s.model.forward = watched
        loop_thread = threading.get_ident()
        prompt = list(range(1, 41))
        assert 1 <= INLINE_TOKENS < len(prompt)
        first = await c.call(forward(s, 1, prompt, 0, 0), 60)
        step = await c.call(forward(s, 2, [int(first.tokens.array()[0])], len(prompt), 0), 60)
        (prompt_tokens, prompt_thread), (decode_tokens, decode_thread) = runs
        assert (prompt_tokens, decode_tokens) == (40, 1)
        assert prompt_thread != loop_thread and decode_thread == loop_thread

        # A decode arriving while a prompt computes waits for the compute thread behind it.
        runs.clear()
        big = asyncio.ensure_future(c.call(forward(s, 3, prompt, 0, 8), 60))
        while not s._computing:
            await asyncio.sleep(0.001)
        small = await c.call(forward(s, 4, [int(step.tokens.array()[0])], len(prompt) + 1, 0), 60)
        await big
        assert most == 1, "two batches touched the model at once"
        assert [n for n, _ in runs] == [40, 1] and all(t != loop_thread for _, t in runs)
        assert small.tokens.array().shape == (1,)

        # Decode steps as slow as a big model's (the watched forward sleeps past INLINE_MAX_S)
        # leave the loop free: they run on the compute thread too.
        assert s._small_step_s > INLINE_MAX_S
        runs.clear()
        await c.call(forward(s, 5, [int(small.tokens.array()[0])], len(prompt) + 2, 0), 60)
        assert runs[0][0] == 1 and runs[0][1] != loop_thread


async def test_a_batch_reports_its_own_compute_not_its_wait_behind_another(model_path):
    """A hop's compute_ms is the compute each shard spent on the batch (what pacing fits a shard's cost per
    token from), not the time it also waited on the compute thread behind the batch ahead."""
    async with called_shard(model_path, "timed") as (s, c):
        gate, inner = threading.Event(), s.model.forward
        started: list[float] = []                 # when the held (first) batch began

        def held(batch, **kw):
            if not started:                       # the first batch waits for the gate
                started.append(time.perf_counter())
                assert gate.wait(60)
            return inner(batch, **kw)

        s.model.forward = held
        prompt = list(range(1, 41))
        first = asyncio.ensure_future(c.call(forward(s, 1, prompt, 0, 0), 60))
        second = asyncio.ensure_future(c.call(forward(s, 2, prompt, 0, 3), 60))
        deadline = time.monotonic() + 30
        while s._computing < 2:                   # both on (or queued for) the compute thread
            assert time.monotonic() < deadline, "the two prompts never reached the shard"
            await asyncio.sleep(0.01)
        released = time.perf_counter()
        gate.set()
        a, b = await first, await second
        back = time.perf_counter()
        assert a.hops[-1].compute_ms / 1e3 >= released - started[0]     # its own hold is its compute
        assert b.hops[-1].compute_ms / 1e3 <= back - released              # none of the wait behind it
