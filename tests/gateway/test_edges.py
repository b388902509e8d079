"""The gateway's edges over real HTTP and a real (empty) bus: no pipeline, the API key, body
limits and deadlines, malformed bodies, unknown paths, each in its protocol's error shape."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import aiohttp
import pytest

from bus.config import BusConfig, ServiceConfig
from gateway.body import parse
from gateway.config import GatewayConfig
from gateway.errors import BadRequest
from gateway.service import GatewayService

KEY = "k-0123456789"


async def start(**gw) -> GatewayService:
    cluster = f"gwtest-{os.getpid()}"
    svc = GatewayService(ServiceConfig(name="gateway-t", kind="gateway", discover=True,
                                       bus=BusConfig(cluster=cluster, mdns=False)),
                         GatewayConfig(port=0, **gw))
    await svc.start()
    return svc


@pytest.fixture
async def open_gateway():
    svc = await start(read_timeout=0.5, header_timeout=0.5, max_body_bytes=1000)
    yield svc
    svc.stop()
    await svc.shutdown()


@pytest.fixture
async def locked_gateway():
    svc = await start(api_key=KEY)
    yield svc
    svc.stop()
    await svc.shutdown()


async def request(svc, method, path, body=None, headers=None, raw: bytes | None = None):
    async with aiohttp.ClientSession() as s:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        async with s.request(method, svc.url + path, data=data, headers={
                "Content-Type": "application/json", **(headers or {})}) as r:
            return r.status, r.headers, await r.json(content_type=None)


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


async def test_health_says_what_is_missing_until_the_pipeline_is_there(open_gateway):
    status, headers, body = await request(open_gateway, "GET", "/health")
    assert status == 503 and headers["Retry-After"] == "1"
    assert body["status"] == "unavailable"
    assert any(m.startswith("tokenizer") for m in body["missing"])
    assert any(m.startswith("scheduler") for m in body["missing"])
    assert any(m.startswith("shards") for m in body["missing"])


@pytest.mark.parametrize("path, shape", [
    ("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic"), ("/api/chat", "ollama")])
async def test_no_pipeline_is_a_503_in_each_protocols_shape(open_gateway, path, shape):
    status, headers, body = await request(open_gateway, "POST", path, CHAT)
    assert status == 503 and int(headers["Retry-After"]) >= 1
    assert_shape(body, shape)


def assert_shape(body: dict, shape: str) -> None:
    if shape == "openai":
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
    elif shape == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    else:
        assert set(body) == {"error"} and isinstance(body["error"], str), body


@pytest.mark.parametrize("path, shape, kind", [
    ("/v1/chat/completions", "openai", "authentication_error"),
    ("/v1/messages", "anthropic", "authentication_error"), ("/api/generate", "ollama", None)])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, {"x-api-key": "k-0"}])
async def test_a_missing_or_wrong_key_is_a_401_in_each_shape(locked_gateway, path, shape, kind,
                                                            headers):
    status, _, body = await request(locked_gateway, "POST", path, CHAT, headers)
    assert status == 401
    assert_shape(body, shape)
    if kind:
        assert body["error"]["type"] == kind


async def test_the_right_key_passes_and_health_needs_none(locked_gateway):
    status, _, body = await request(locked_gateway, "POST", "/v1/messages", CHAT,
                                    {"x-api-key": KEY})
    assert status == 503          # past the key: there is just no pipeline
    status, _, _ = await request(locked_gateway, "GET", "/health")
    assert status == 503          # unauthenticated, and honest about the pipeline


async def raw_exchange(svc, head: bytes, body: bytes = b"", timeout: float = 5.0) -> bytes:
    """Send raw bytes on one connection and read what comes back until it closes or a status
    line and headers came (the server may answer before the body is sent)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", svc.http_port)
    try:
        writer.write(head + body)
        await writer.drain()
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    finally:
        writer.close()


async def test_the_key_is_checked_before_the_body_is_read(locked_gateway):
    # Headers announce a megabyte that never comes: the 401 must not wait for it.
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n")
    answer = await raw_exchange(locked_gateway, head, timeout=3.0)
    assert answer.startswith(b"HTTP/1.1 401")


async def test_a_body_over_the_limit_is_refused_before_it_is_read(open_gateway):
    head = (b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 5000\r\n\r\n")
    assert (await raw_exchange(open_gateway, head, timeout=3.0)).startswith(b"HTTP/1.1 413")


async def test_a_chunked_body_over_the_limit_is_a_413(open_gateway):
    async def chunks():
        for _ in range(10):
            yield b" " * 200
    async with aiohttp.ClientSession() as s:
        async with s.post(open_gateway.url + "/v1/chat/completions", data=chunks(),
                          headers={"Content-Type": "application/json"}) as r:
            assert r.status == 413
            assert (await r.json())["error"]["code"] == "too_large"


async def test_a_slow_body_is_cut_off_at_the_read_deadline(open_gateway):
    head = (b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n")
    answer = await raw_exchange(open_gateway, head, b'{"model":', timeout=5.0)
    assert answer.startswith(b"HTTP/1.1 408")


async def test_headers_that_never_end_lose_the_connection(open_gateway):
    reader, writer = await asyncio.open_connection("127.0.0.1", open_gateway.http_port)
    try:
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        await writer.drain()
        # The server closes it at its header deadline (0.5 s here), long before this one.
        assert await asyncio.wait_for(reader.read(), 5.0) == b""
    finally:
        writer.close()


# What JSON allows and msgpack cannot carry (schemathesis found a 500 for the first, in a tool's
# schema) is refused here, before any of it reaches the bus.
_TOOL = (b'"tools": [{"type": "function", "function": {"name": "f", "parameters": '
         b'{"type": "object", "maximum": -437780857333977591054336}}}]')


@pytest.mark.parametrize("raw, says", [
    (b"{not json", "not valid JSON"), (b"", "empty"), (b"[1, 2]", "JSON object"),
    (b'{"model": "m", ' + _TOOL + b', "messages": []}', "integer -437780857333977591054336"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}',
     "messages[0].content holds an unpaired UTF-16 surrogate (\\ud800)")])
async def test_malformed_bodies_are_400s(open_gateway, raw, says):
    status, _, body = await request(open_gateway, "POST", "/v1/chat/completions", raw=raw)
    assert status == 400 and says in body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"


def test_a_body_nested_past_the_recursion_limit_is_a_bad_request():
    # Over open_gateway's 1000-byte limit, so the parser is asked directly: json raises
    # RecursionError here, which is not a ValueError and was a 500.
    depth = sys.getrecursionlimit() + 100
    with pytest.raises(BadRequest, match="too deeply"):
        parse(b'{"messages": ' + b"[" * depth + b"]" * depth + b"}")


async def test_a_missing_required_field_is_named(open_gateway):
    status, _, body = await request(open_gateway, "POST", "/v1/messages",
                                    {"messages": [], "max_tokens": 1})
    assert status == 400 and "model" in body["error"]["message"]


async def test_unknown_paths_and_methods(open_gateway):
    status, _, body = await request(open_gateway, "GET", "/v2/nothing")
    assert status == 404 and "/v2/nothing" in body["error"]["message"]
    status, _, body = await request(open_gateway, "GET", "/v1/chat/completions")
    assert status == 405 and "POST" in body["error"]["message"]


async def test_ollama_root_answers_like_ollama(open_gateway):
    async with aiohttp.ClientSession() as s:
        async with s.get(open_gateway.url + "/") as r:
            assert r.status == 200 and await r.text() == "Ollama is running"


async def test_openapi_describes_every_route_and_is_valid(open_gateway):
    from openapi_spec_validator import validate
    status, _, doc = await request(open_gateway, "GET", "/openapi.json")
    assert status == 200
    validate(doc)
    app_routes = {(r.method.lower(), r.resource.canonical) for r in
                  open_gateway._runner.app.router.routes() if r.method != "HEAD"}
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert documented == app_routes
    chat = doc["paths"]["/v1/chat/completions"]["post"]
    assert "messages" in chat["requestBody"]["content"]["application/json"]["schema"]["required"]
    assert "text/event-stream" in chat["responses"]["200"]["content"]


SHAPES = [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic"),
          ("/api/chat", "ollama")]


@pytest.mark.parametrize("path, shape", SHAPES)
async def test_bad_json_and_a_body_over_the_limit_in_each_protocols_shape(open_gateway, path,
                                                                         shape):
    status, _, body = await request(open_gateway, "POST", path, raw=b"{not json")
    assert status == 400
    assert_shape(body, shape)

    async def chunks():
        for _ in range(10):
            yield b" " * 200     # 2000 bytes, over this gateway's 1000, sent without a length
    async with aiohttp.ClientSession() as s:
        async with s.post(open_gateway.url + path, data=chunks(),
                          headers={"Content-Type": "application/json"}) as r:
            assert r.status == 413
            assert_shape(await r.json(), shape)


@pytest.mark.parametrize("path, shape", SHAPES)
def test_a_full_queue_is_a_429_with_retry_after_in_each_protocols_shape(path, shape):
    from gateway.errors import Overloaded
    from gateway.protocols.anthropic import Anthropic
    from gateway.protocols.ollama import Ollama
    from gateway.protocols.openai import OpenAI
    proto = {"openai": OpenAI, "anthropic": Anthropic, "ollama": Ollama}[shape](None, GatewayConfig())
    resp = proto.error(Overloaded("the cluster is busy", retry_after=2.2))
    assert resp.status == 429 and resp.headers["Retry-After"] == "3"
    assert_shape(json.loads(resp.body), shape)
