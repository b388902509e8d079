"""The gateway's aiohttp application over a real Backend whose bus has nobody on it: what the
gateway answers by itself (refusals, /health of an empty cluster), without a stack."""

from __future__ import annotations

import contextlib

import zmq.asyncio
from aiohttp.test_utils import TestClient, TestServer

from bus.config import BusConfig
from bus.directory import Directory
from bus.peers import Peers
from gateway.app import build_app
from gateway.backend import Backend
from gateway.config import GatewayConfig
from gateway.metrics import Metrics


@contextlib.asynccontextmanager
async def backend_of_nobody():
    """A real Backend over a directory that has found nobody."""
    ctx = zmq.asyncio.Context()
    directory = Directory(ctx, BusConfig(mdns=False))
    try:
        yield Backend(directory, Peers(ctx, directory, "gw-test"), 30.0, Metrics(), carry_s=0.0)
    finally:
        ctx.destroy(linger=0)


@contextlib.asynccontextmanager
async def gateway_client(config: GatewayConfig | None = None, **kw):
    """(client, directory): an HTTP client of a gateway app built from `config` (or kw)."""
    config = config or GatewayConfig(**kw)
    async with backend_of_nobody() as backend:
        client = TestClient(TestServer(build_app(backend, config), host=config.host))
        await client.start_server()
        try:
            yield client, backend.directory
        finally:
            await client.close()
