"""Streamed replies over real sockets on loopback: yields in order, typed errors, cancellation,
and a caller that vanishes stops the handler."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import zmq
import zmq.asyncio

import wire
from bus.client import RpcClient
from bus.config import BusConfig, ServiceConfig
from bus.errors import RemoteError, ServiceError
from bus.service import Service, streams
from wire.messages.bus import EchoReply

from ..waiting import until
from .serving import client_of, running


@wire.message("test.count")
class Count:
    n: int
    delay: float = 0.0
    fail_at: int = -1


class Counter(Service):
    kind = "test"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.closed: list[int] = []       # n of every stream whose handler ran its finally
        self.produced = 0

    @streams(Count)
    async def count(self, msg):
        try:
            for i in range(msg.body.n):
                if i == msg.body.fail_at:
                    raise ServiceError("boom", f"failed at {i}")
                await asyncio.sleep(msg.body.delay)
                self.produced += 1
                yield EchoReply(text=str(i))
        finally:
            self.closed.append(msg.body.n)


@pytest.fixture
async def service():
    config = ServiceConfig(name="counter", kind="test", bus=BusConfig(cluster="stream-test", mdns=False))
    async with running(Counter(config, ctx=zmq.asyncio.Context.instance())) as s:
        yield s


@pytest.fixture
async def client(service):
    async with client_of(service) as c:
        yield c


async def wait_until(cond, timeout=5.0):
    await until(cond, timeout)


async def test_a_stream_yields_every_reply_in_order_then_ends(service, client):
    got = [r.text async for r in client.stream(Count(n=50))]
    assert got == [str(i) for i in range(50)]
    await wait_until(lambda: service.closed == [50])
    # the plain call path still works beside streams
    assert [r.text async for r in client.stream(Count(n=0))] == []


async def test_an_error_mid_stream_reaches_the_caller_typed(client):
    got = []
    with pytest.raises(RemoteError) as e:
        async for r in client.stream(Count(n=10, fail_at=3)):
            got.append(r.text)
    assert got == ["0", "1", "2"] and e.value.code == "boom"


async def test_closing_the_stream_early_stops_the_handler(service, client):
    async with contextlib.aclosing(client.stream(Count(n=10_000, delay=0.01))) as replies:
        async for r in replies:
            if r.text == "5":
                break
    await wait_until(lambda: service.closed == [10_000])
    assert service.counters["streams_cancelled"] == 1
    produced = service.produced
    # Producing nothing more is what is tested: twenty of the handler's 10 ms steps pass silent.
    await asyncio.sleep(0.2)
    assert service.produced == produced < 100


async def test_concurrent_streams_on_one_client_do_not_mix(client):
    async def take(n):
        return [r.text async for r in client.stream(Count(n=n, delay=0.001))]
    a, b = await asyncio.gather(take(30), take(20))
    assert a == [str(i) for i in range(30)] and b == [str(i) for i in range(20)]


async def test_a_caller_that_vanishes_stops_the_handler(service):
    c = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{service.rpc_port}")
    replies = c.stream(Count(n=10_000, delay=0.01))
    await replies.__anext__()
    # Close the socket under the stream without a cancel: what a killed process looks like.
    c._closed = True
    c._sock.close(linger=0)
    await wait_until(lambda: service.closed == [10_000])
    assert service.counters["streams_gone"] == 1
    with contextlib.suppress(Exception):
        await replies.aclose()
    await c.close()


async def test_a_silent_stream_times_out_typed(client):
    from bus.errors import CallTimeout
    with pytest.raises(CallTimeout):
        async for _ in client.stream(Count(n=3, delay=2.0), idle_timeout=0.2):
            pass
