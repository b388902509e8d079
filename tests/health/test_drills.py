"""Kill drills on `llmbus up`: a tokenizer killed under load is invisible to clients (every
request ends with its undisturbed text); a scheduler killed under load ends the streams of bus
clients with an explicit retryable error (PeerDead/PeerRestarted), while the gateway carries its
HTTP streams to the respawned scheduler (the client sees a pause, then the undisturbed text); an
HTTP request that finds no scheduler at all gets 503 with Retry-After, and new requests are served
once it is back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time

import aiohttp
import pytest
import zmq.asyncio

from bus.errors import PeerDead, PeerRestarted
from bus.peers import Peers
from wire.messages.bus import Status
from wire.messages.scheduler import Done, Generate, Tokens

from ..serve.stack import call, generate
from ..waiting import until
from .chaos_watch import Flow, Watch

pytestmark = pytest.mark.slow

ASKS = ["Describe a forest in spring.", "Write about a quiet harbour.", "Tell me about owls.",
        "Describe a city at night.", "Write about an old bridge.", "Tell me about the moon.",
        "Describe a summer storm.", "Write about a long road."]


@pytest.fixture
def stack(up3):
    return up3


def ask(i: int, max_tokens: int = 24) -> Generate:
    return Generate(messages=[{"role": "user", "content": ASKS[i]}], temperature=0.0,
                    max_tokens=max_tokens)


async def test_a_tokenizer_killed_under_load_is_invisible_to_clients(stack):
    want = await asyncio.gather(*(generate(stack.endpoint, ask(i)) for i in range(len(ASKS))))
    async with Watch(stack) as watch:
        await until(lambda: watch.directory.get("tokenizer-0"), 30, what="the tokenizer")
        epoch, pid = watch.epoch_of("tokenizer-0"), await watch.pid_of("tokenizer-0")
        retries = (await call(stack.endpoint, Status())).counters.get("tokenizer_retries", 0)
        flow = Flow(len(ASKS))
        half = len(ASKS) // 2
        first = [asyncio.ensure_future(generate(stack.endpoint, ask(i), on_tokens=flow.saw(i)))
                 for i in range(half)]
        await until(lambda: flow.total() > 0, 60, what="tokens of the first requests")
        os.kill(pid, signal.SIGKILL)
        # These arrive while the tokenizer is dead or restarting: their prompts must wait for it.
        second = [asyncio.ensure_future(generate(stack.endpoint, ask(i))) for i in range(half, len(ASKS))]
        got = await asyncio.wait_for(asyncio.gather(*first, *second), 120)
        assert watch.epoch_of("tokenizer-0") != epoch          # it was killed and respawned
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.done is not None and g.done.finish_reason == w.done.finish_reason, (ASKS[i], g.done)
        assert g.token_ids == w.token_ids and g.text == w.text, ASKS[i]
    after = (await call(stack.endpoint, Status())).counters.get("tokenizer_retries", 0)
    assert after > retries                     # some prompt was rendered while it was down


async def test_a_scheduler_killed_under_load_ends_bus_streams_retryably_carries_http_ones(stack):
    model = await _model(stack)
    want = await generate(stack.endpoint, ask(0))
    want_http = await _http_stream(stack, model, max_tokens=60)
    async with Watch(stack) as watch:
        ctx = zmq.asyncio.Context()
        peers = Peers(ctx, watch.directory, me="drill")
        await until(lambda: watch.directory.get("scheduler-0"), 30, what="the scheduler")
        epoch, pid = watch.epoch_of("scheduler-0"), await watch.pid_of("scheduler-0")
        try:
            flow = Flow(3)
            bus = [asyncio.ensure_future(_bus_stream(peers, ask(i, 400), flow.saw(i))) for i in range(3)]
            http_stream = asyncio.ensure_future(_http_stream(stack, model, max_tokens=60))
            await until(lambda: min(flow.counts) > 0, 60, what="every bus stream's first tokens")
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            plain = await _http_plain(stack, model)                 # asked while it is gone
            ended = await asyncio.wait_for(asyncio.gather(*bus, http_stream), 120)
        finally:
            await peers.close()
            ctx.destroy(linger=0)
        for e in ended[:3]:                     # the bus names what happened; a client retries
            assert isinstance(e, (PeerDead, PeerRestarted)), e
        assert ended[3] == want_http            # carried: the whole answer, no error
        status, headers, body = plain
        # Whether the gateway still saw the dead scheduler (then it carried the request too) or
        # saw none (then the client is told to come back).
        if status == 503:
            assert int(headers["Retry-After"]) >= 1, body
            assert body["error"]["type"] == "service_unavailable_error", body
        else:
            assert status == 200, body
        await until(lambda: (e := watch.directory.get("scheduler-0")) is not None
                    and e.epoch != epoch and e.state == "ready", 60, what="the new scheduler")
        back = time.monotonic()
    status, content = await _http_until_served(stack, model)
    served = time.monotonic()
    again = await generate(stack.endpoint, ask(0))
    print(f"\nscheduler killed: a new one ready {back - killed:.2f} s after, a whole 24-token "
          f"answer over HTTP {served - back:.2f} s after that")
    assert status == 200 and content == want.text
    assert again.token_ids == want.token_ids and again.text == want.text


async def _model(stack) -> str:
    async with aiohttp.ClientSession() as s, s.get(stack.http + "/v1/models") as r:
        return (await r.json())["data"][0]["id"]


async def _bus_stream(peers: Peers, body: Generate, on_tokens) -> Exception | None:
    """Run one request through a directory-backed client; the error it ended with, if any."""
    n = 0
    try:
        async with contextlib.aclosing(peers.stream("scheduler-0", body, idle_timeout=60)) as events:
            async for ev in events:
                if isinstance(ev, Tokens):
                    n += len(ev.token_ids)
                    on_tokens(n)
                elif isinstance(ev, Done):
                    return None
    except (PeerDead, PeerRestarted) as e:
        return e
    return None


async def _http_stream(stack, model: str, max_tokens: int) -> str:
    """A streamed OpenAI chat: its text, which must end with a finish reason and [DONE]."""
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": ASKS[1]}]}
    text, finish, lines = "", None, []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        async with s.post(stack.http + "/v1/chat/completions", json=body) as r:
            assert r.status == 200
            async for line in r.content:
                if line.strip():
                    lines.append(line)
    assert lines[-1] == b"data: [DONE]\n", lines[-3:]
    for line in lines[:-1]:
        ev = json.loads(line[len(b"data: "):])
        assert "error" not in ev, ev
        text += ev["choices"][0]["delta"].get("content") or ""
        finish = ev["choices"][0]["finish_reason"] or finish
    assert finish == "length", lines[-3:]
    return text


async def _http_plain(stack, model: str, content: str = ASKS[2]) -> tuple[int, dict, dict]:
    body = {"model": model, "max_tokens": 24, "temperature": 0,
            "messages": [{"role": "user", "content": content}]}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        async with s.post(stack.http + "/v1/chat/completions", json=body) as r:
            return r.status, dict(r.headers), await r.json()


async def _http_until_served(stack, model: str) -> tuple[int, str]:
    """Ask as an HTTP client does after a 503: again after its Retry-After, for up to 30 s."""
    deadline = time.monotonic() + 30
    while True:
        status, headers, body = await _http_plain(stack, model, ASKS[0])
        if status != 503 or time.monotonic() > deadline:
            return status, body["choices"][0]["message"]["content"] if status == 200 else body
        await asyncio.sleep(int(headers.get("Retry-After", 1)))


async def test_a_request_past_its_deadline_ends_failed_with_reason_deadline(stack):
    body = Generate(messages=[{"role": "user", "content": ASKS[3]}], temperature=0.0,
                    max_tokens=2000, deadline_s=0.5)
    res = await generate(stack.endpoint, body)
    assert res.done.finish_reason == "failed" and res.done.detail.startswith("deadline: "), res.done
    assert len(res.token_ids) < 2000


async def test_a_gateway_stopped_under_a_stream_ends_it_with_an_error_naming_why(stack):
    model = await _model(stack)
    async with Watch(stack) as watch:
        await until(lambda: watch.directory.get("gateway-0"), 30, what="the gateway")
        epoch, pid = watch.epoch_of("gateway-0"), await watch.pid_of("gateway-0")
        lines: list[bytes] = []
        body = {"model": model, "stream": True, "max_tokens": 400, "temperature": 0,
                "messages": [{"role": "user", "content": ASKS[4]}]}

        async def read():
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
                async with s.post(stack.http + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200
                    async for line in r.content:
                        if line.strip():
                            lines.append(line)

        reading = asyncio.ensure_future(read())
        await until(lambda: len(lines) >= 3, 60, what="the stream's first tokens")
        os.kill(pid, signal.SIGTERM)           # as systemd stops (or restarts) it
        await asyncio.wait_for(reading, 60)
        assert lines[-1] == b"data: [DONE]\n", lines[-3:]
        error = json.loads(lines[-2][len(b"data: "):])["error"]
        assert error["type"] == "service_unavailable_error" and "gateway is stopping" in \
            error["message"], error
        # The watcher starts it again, where its clients found it (the stack asked for any
        # free port, --http 127.0.0.1:0: the first one's is kept); the later tests need it.
        new = await until(lambda: (e := watch.directory.get("gateway-0")) is not None
                          and e.epoch != epoch and e.info.http and e, 60, what="a new gateway")
        assert new.info.http == stack.http
    await until(_served(stack), 60, what="the new gateway answering")


def _served(stack):
    async def served() -> bool:
        try:
            async with aiohttp.ClientSession() as s, s.get(stack.http + "/v1/models") as r:
                return r.status == 200 and bool((await r.json())["data"])
        except aiohttp.ClientError:
            return False
    return served
