"""Gathering and merging scheduler event streams: admission first, order kept, closing
reaches every inner stream (that is what cancels requests in the scheduler)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.errors import Overloaded, UpstreamFailed
from gateway.generation import Result, admitted, collect, merged
from wire.messages.scheduler import Done, Started, Tokens


def events(rid: str, texts: list[str], reason: str = "stop"):
    out = [Started(request_id=rid, prompt_tokens=3, max_tokens=10, seed=1)]
    out += [Tokens(request_id=rid, text=t, token_ids=[i], logprobs=[-0.5])
            for i, t in enumerate(texts)]
    return out + [Done(request_id=rid, finish_reason=reason, prompt_tokens=3,
                       completion_tokens=len(texts))]


class Stream:
    """An async iterator over given events that records whether it was closed early."""

    def __init__(self, evs, fail_first: Exception | None = None, pause: asyncio.Event | None = None):
        self.evs, self.fail_first, self.pause, self.closed = evs, fail_first, pause, False

    async def gen(self):
        try:
            if self.fail_first is not None:
                raise self.fail_first
            for i, ev in enumerate(self.evs):
                if i == 2 and self.pause is not None:
                    await self.pause.wait()
                yield ev
        finally:
            self.closed = True


async def test_collect_gathers_text_counts_and_reason():
    r = await collect(Stream(events("a", ["The", " end"], "length")).gen())
    assert (r.text, r.token_ids, r.completion_tokens, r.prompt_tokens) == ("The end", [0, 1], 2, 3)
    assert r.length_limited and r.first_token_at is not None


async def test_a_failed_request_raises():
    with pytest.raises(UpstreamFailed, match="oom"):
        await collect(Stream(events("a", ["x"], "failed")[:-1] + [
            Done(request_id="a", finish_reason="failed", prompt_tokens=3, completion_tokens=1,
                 detail="oom")]).gen())


async def test_admission_refusals_raise_before_anything_is_sent():
    ok = Stream(events("a", ["x"]))
    refused = Stream([], fail_first=Overloaded("full", retry_after=2))
    results = [Result(), Result()]
    async with contextlib.aclosing(merged([ok.gen(), refused.gen()])) as evs:
        with pytest.raises(Overloaded):
            await admitted(evs, results)
    assert ok.closed and refused.closed


async def test_replay_keeps_each_streams_order_and_fills_results():
    a, b = Stream(events("a", ["1", "2", "3"])), Stream(events("b", ["x", "y"]))
    results = [Result(), Result()]
    async with contextlib.aclosing(merged([a.gen(), b.gen()])) as evs:
        seen = [(i, ev) async for i, ev in await admitted(evs, results)]
    for i, s in enumerate((a, b)):
        assert [ev for j, ev in seen if j == i] == s.evs
    assert [r.text for r in results] == ["123", "xy"] and all(r.done for r in results)


async def test_closing_early_closes_every_stream():
    gate = asyncio.Event()          # never set: both streams stall after their first token
    a, b = Stream(events("a", ["1", "2"]), pause=gate), Stream(events("b", ["x", "y"]), pause=gate)
    results = [Result(), Result()]
    async with contextlib.aclosing(merged([a.gen(), b.gen()])) as evs:
        replay = await admitted(evs, results)
        async for _ in replay:
            break
    assert a.closed and b.closed


async def test_a_stream_ending_without_done_is_an_error():
    cut = Stream(events("a", ["1"])[:-1])
    async with contextlib.aclosing(merged([cut.gen()])) as evs:
        with pytest.raises(UpstreamFailed, match="without saying why"):
            async for _ in await admitted(evs, [Result()]):
                pass
