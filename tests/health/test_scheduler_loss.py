"""The scheduler's death loses nothing: 12 chats streamed through the gateway live through two
SIGKILLs and a SIGSTOP of the scheduler, greedy and seeded (temperature 0.8), and each ends with
exactly its undisturbed text, every token once (the gateway carries each request to the respawned
scheduler as a continuation; the client sees a pause). A tokenizer killed under 8 new requests
through the gateway loses none of them either. After the drills no shard holds a page of a
scheduler run that is gone. Prints the longest pause and how soon tokens flowed after each
respawn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass, field

import aiohttp
import pytest

from wire.messages.scheduler import StatsRequest

from ..serve.stack import call
from ..waiting import until
from .chaos_watch import Flow, Watch, gone_at

pytestmark = pytest.mark.slow

TOPICS = ["the sea", "a mountain village", "winter in a city", "an old library", "a desert road",
          "a rainy harbour", "a garden at night", "a train journey", "a market at dawn",
          "a lighthouse", "a river in autumn", "a snowy forest"]
MAX_TOKENS = 96
DISRUPTIONS = ("kill", "stop", "kill")
SCHEDULER = "scheduler-0"


@pytest.fixture
def stack(up3):
    return up3


@dataclass
class Chat:
    """One streamed chat as its client saw it: text, the token of each logprob entry, times."""
    text: str = ""
    tokens: list[str] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    finish: str | None = None
    completion_tokens: int | None = None
    error: dict | None = None

    def longest_pause(self) -> float:
        return max((b - a for a, b in zip(self.arrivals, self.arrivals[1:])), default=0.0)


async def chat(stack, model: str, i: int, sampling: dict, flow: Flow | None = None) -> Chat:
    body = {"model": model, "stream": True, "max_tokens": MAX_TOKENS, "logprobs": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"Write a long, detailed description of "
                                                     f"{TOPICS[i]}."}], **sampling}
    out = Chat()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as s:
        async with s.post(stack.http + "/v1/chat/completions", json=body) as r:
            assert r.status == 200, await r.text()
            async for line in r.content:
                if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    out.error = ev["error"]
                    continue
                if ev.get("usage"):
                    out.completion_tokens = ev["usage"]["completion_tokens"]
                for choice in ev["choices"]:
                    lp = (choice.get("logprobs") or {}).get("content") or []
                    if lp:
                        out.tokens += [t["token"] for t in lp]
                        out.arrivals.append(time.monotonic())
                        if flow is not None:
                            flow.saw(i)(len(out.tokens))
                    out.text += choice["delta"].get("content") or ""
                    out.finish = choice.get("finish_reason") or out.finish
    return out


async def model_id(stack) -> str:
    async with aiohttp.ClientSession() as s, s.get(stack.http + "/v1/models") as r:
        return (await r.json())["data"][0]["id"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 1234}],
                         ids=["greedy", "seeded"])
async def test_twelve_streams_live_through_two_kills_and_a_stop_of_the_scheduler(stack, sampling):
    model = await model_id(stack)
    want = await asyncio.gather(*(chat(stack, model, i, sampling) for i in range(len(TOPICS))))
    assert all(w.finish == "length" and w.error is None for w in want), \
        [(w.finish, w.error) for w in want]         # each lasts long enough to be disturbed
    report = []
    async with Watch(stack) as watch:
        await until(lambda: watch.directory.get(SCHEDULER), 30, what="the scheduler")
        flow = Flow(len(TOPICS))
        runs = [asyncio.ensure_future(chat(stack, model, i, sampling, flow))
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
        assert g.error is None, (TOPICS[i], g.error)
        assert g.finish == w.finish and g.completion_tokens == w.completion_tokens, TOPICS[i]
        # Every token once, in order, and the text exactly the undisturbed text.
        assert g.tokens == w.tokens and g.text == w.text, TOPICS[i]
        assert len(g.tokens) == g.completion_tokens, TOPICS[i]


async def disrupt(watch: Watch, flow: Flow, how: str) -> str:
    epoch = watch.epoch_of(SCHEDULER)
    pid = await watch.pid_of(SCHEDULER)
    t0 = time.monotonic()
    if how == "kill":
        os.kill(pid, signal.SIGKILL)
    else:   # stopped until the watcher kills it (SIGCONT after, should it still be there)
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.wait_for(gone_at(pid), 30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    back = await until(lambda: watch.ready_after(SCHEDULER, epoch), 60,
                       what="a new scheduler ready")
    flowing = await until(lambda: flow.first_after(back), 60, what="tokens after the respawn")
    # Each stream goes on before the next disruption.
    seen = list(flow.counts)
    await until(lambda: all(c > s for c, s in zip(flow.counts, seen)), 60,
                what="every stream's tokens again")
    return (f"SIG{how.upper()} {SCHEDULER}: a new one ready after {back - t0:.2f} s, tokens "
            f"again {flowing - back:.2f} s after that, every stream again "
            f"{time.monotonic() - back:.2f} s after it")


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
    model = await model_id(stack)
    greedy = {"temperature": 0}
    want = await asyncio.gather(*(chat(stack, model, i, greedy) for i in range(8)))
    async with Watch(stack) as watch:
        await until(lambda: watch.directory.get("tokenizer-0"), 30, what="the tokenizer")
        epoch, pid = watch.epoch_of("tokenizer-0"), await watch.pid_of("tokenizer-0")
        os.kill(pid, signal.SIGKILL)
        # Sent while it is dead or restarting: their prompts wait for the tokenizer that is next.
        got = await asyncio.wait_for(asyncio.gather(*(chat(stack, model, i, greedy)
                                                      for i in range(8))), 240)
        await until(lambda: watch.ready_after("tokenizer-0", epoch), 60, what="a new tokenizer")
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.error is None and g.finish == w.finish, (TOPICS[i], g.error)
        assert g.tokens == w.tokens and g.text == w.text, TOPICS[i]
