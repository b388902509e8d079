"""Closing an RpcClient: calls and streams in flight end with ClientClosed, a BusError, and a
closed client refuses new calls with it."""

from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio

from bus.client import RpcClient
from bus.errors import BusError, ClientClosed
from wire.messages.bus import Echo

from .waiting import wait_until


@pytest.fixture
async def silent_peer():
    """A real ROUTER that reads requests and never answers."""
    router = zmq.asyncio.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    yield f"tcp://127.0.0.1:{port}"
    router.close()


async def test_closing_fails_calls_and_streams_in_flight_with_client_closed(silent_peer):
    c = RpcClient(zmq.asyncio.Context.instance(), silent_peer)
    call = asyncio.create_task(c.call(Echo(), timeout=30))
    stream = asyncio.create_task(anext(c.stream(Echo(), idle_timeout=30)))
    await wait_until(lambda: len(c._pending) == 2)
    await c.close()
    for task in (call, stream):
        with pytest.raises(ClientClosed):
            await asyncio.wait_for(task, 5)
    assert issubclass(ClientClosed, BusError)


async def test_a_closed_client_refuses_calls_and_streams(silent_peer):
    c = RpcClient(zmq.asyncio.Context.instance(), silent_peer)
    await c.close()
    with pytest.raises(ClientClosed):
        await c.call(Echo())
    with pytest.raises(ClientClosed):
        await anext(c.stream(Echo()))
