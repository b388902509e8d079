"""Findings: a gateway out of file descriptors wrote 34,707 tracebacks (15 MB) in 13 s; one 5 KB
request with deeply nested JSON logged a 180 KB traceback; nothing capped connections. Now a
repeated failure is logged once per interval with a count and a short traceback, a nested body
is a 400 that logs nothing, and connections past --max-connections get a 503 and are closed."""

from __future__ import annotations

import asyncio
import errno
import logging

from aiohttp import web

from gateway.app import build_app
from gateway.config import GatewayConfig

from .gateway_app import gateway_client


def test_a_repeated_failure_is_logged_once_per_interval_with_a_count(caplog):
    from gateway.lograte import RateLimitedLog
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("test.flood"), interval_s=60.0,
                             clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, "test.flood"):
        for i in range(34_707):
            now[0] = i * 13.0 / 34_707
            try:
                raise OSError(errno.EMFILE, "Too many open files")
            except OSError:
                limited.exception(("OSError", "/v1/chat/completions"), "POST failed")
        now[0] = 61.0
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError:
            limited.exception(("OSError", "/v1/chat/completions"), "POST failed")
    assert len(caplog.records) == 2
    assert "34706 more like it" in caplog.records[1].getMessage()


def test_a_recursion_traceback_is_short(caplog):
    from gateway.lograte import RateLimitedLog
    limited = RateLimitedLog(logging.getLogger("test.deep"))

    def deep(n):
        return deep(n + 1)
    with caplog.at_level(logging.ERROR, "test.deep"):
        try:
            deep(0)
        except RecursionError:
            limited.exception("deep", "failed")
    assert len(caplog.text) < 4000


async def test_a_deeply_nested_body_is_a_400_that_logs_nothing(caplog):
    deep = b'{"model": "m", "tools": ' + b"[" * 2500 + b"]" * 2500 + b"}"
    less = b'{"model": "m", "tools": [' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"]}"
    async with gateway_client() as (client, _):
        with caplog.at_level(logging.INFO, "llmbus.gateway"):
            for body, param in ((deep, None), (less, "tools")):
                async with client.post("/v1/chat/completions", data=body,
                                       headers={"Content-Type": "application/json"}) as resp:
                    assert resp.status == 400
                    error = (await resp.json())["error"]
                    assert error["param"] == param and "deeper than" in error["message"]
    assert caplog.text == ""


async def test_connections_past_the_cap_get_503_and_are_closed():
    from gateway.connections import CappedSite
    from .gateway_app import backend_of_nobody
    async with backend_of_nobody() as backend:
        runner = web.AppRunner(build_app(backend, GatewayConfig(port=0, max_connections=2)))
        await runner.setup()
        site = CappedSite(runner, "127.0.0.1", 0, limit=2)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            await asyncio.sleep(0)   # (the server registers them as they are accepted)
            for _ in range(100):
                if len(runner.server.connections) == 2:
                    break
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            answer = await asyncio.wait_for(reader.read(), 10)
            assert answer.startswith(b"HTTP/1.1 503") and b"--max-connections" in answer
            writer.close()
            # A held connection is served as ever.
            r, w = held[0]
            w.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert (await asyncio.wait_for(r.readline(), 10)).startswith(b"HTTP/1.1 503")
            for _, w in held:
                w.close()
        finally:
            await runner.cleanup()
