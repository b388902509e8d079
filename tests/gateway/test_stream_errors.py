"""An error after a stream began is the stream's last event, in the protocol's form: the
gateway is stopped mid-answer (SIGTERM, as systemd stops or restarts it; `llmbus up` starts it
again, where it listened, for the next protocol). (A scheduler killed mid-answer is no error any
more: the gateway carries the request, tests/health/test_scheduler_loss.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import signal

import aiohttp
import pytest

from bus.errors import BusError
from wire.messages.bus import Status

from ..serve.stack import Stack, call, wait_for

pytestmark = pytest.mark.slow

STORY = [{"role": "user", "content": "Tell me a very long story about a dragon."}]


@pytest.fixture(scope="module")
def lone_stack(tmp_path_factory, model_path):
    s = Stack(tmp_path_factory.mktemp("gateway-kill"), "--shards", "1", "--model", str(model_path))
    yield s
    s.stop()


async def healthy(stack) -> bool:
    with contextlib.suppress(aiohttp.ClientError):
        async with aiohttp.ClientSession() as s:
            async with s.get(stack.http + "/health") as r:
                return r.status == 200
    return False


async def gateway_pid(stack) -> int | None:
    for peer in stack.info["peers"]:
        with contextlib.suppress(BusError):
            status = await call("tcp://" + peer, Status(), timeout=2)
            if status.kind == "gateway":
                return status.pid
    return None


async def stream_until_stopped(stack, path: str, body: dict) -> list[bytes]:
    """Start a stream, stop the gateway after the first pieces, read what follows to the end."""
    await wait_for(lambda: healthy(stack), timeout=60, every=0.25)
    pid = await wait_for(lambda: gateway_pid(stack), timeout=30)
    lines: list[bytes] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        async with s.post(stack.http + path, json=body) as r:
            assert r.status == 200
            async for line in r.content:
                lines.append(line)
                if len(lines) == 12:
                    os.kill(pid, signal.SIGTERM)
    return [ln for ln in lines if ln.strip()]


async def test_openai_ends_with_an_error_chunk_then_done(lone_stack):
    model = await _model(lone_stack)
    lines = await stream_until_stopped(lone_stack, "/v1/chat/completions", {
        "model": model, "messages": STORY, "stream": True, "max_tokens": 2000, "temperature": 0})
    assert lines[-1] == b"data: [DONE]\n"
    error = json.loads(lines[-2][len(b"data: "):])["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == "unavailable"
    assert "gateway is stopping" in error["message"]


async def test_anthropic_ends_with_an_error_event(lone_stack):
    model = await _model(lone_stack)
    lines = await stream_until_stopped(lone_stack, "/v1/messages", {
        "model": model, "messages": STORY, "stream": True, "max_tokens": 2000,
        "temperature": 0})
    assert lines[-2] == b"event: error\n"
    body = json.loads(lines[-1][len(b"data: "):])
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"


async def test_ollama_ends_with_an_error_line(lone_stack):
    model = await _model(lone_stack)
    lines = await stream_until_stopped(lone_stack, "/api/chat", {
        "model": model, "messages": STORY, "options": {"num_predict": 2000, "temperature": 0}})
    assert set(json.loads(lines[-1])) == {"error"}
    assert all(json.loads(ln)["done"] is False for ln in lines[:-1])


async def test_responses_end_with_an_error_event_numbered_in_turn(lone_stack):
    model = await _model(lone_stack)
    lines = await stream_until_stopped(lone_stack, "/v1/responses", {
        "model": model, "input": STORY, "stream": True, "max_output_tokens": 2000,
        "temperature": 0})
    assert lines[-2] == b"event: error\n"
    body = json.loads(lines[-1][len(b"data: "):])
    numbers = [json.loads(ln[len(b"data: "):])["sequence_number"] for ln in lines
               if ln.startswith(b"data: ")]
    assert body["type"] == "error" and body["code"] == "unavailable"
    assert "gateway is stopping" in body["message"] and numbers == list(range(len(numbers)))


async def _model(stack) -> str:
    await wait_for(lambda: healthy(stack), timeout=60, every=0.25)   # the gateway is back
    async with aiohttp.ClientSession() as s:
        async with s.get(stack.http + "/v1/models") as r:
            return (await r.json())["data"][0]["id"]
