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
async def gateway_client(config: GatewayConfig | None = None, **kw):
    """(client, directory): an HTTP client of a gateway app built from `config` (or kw)."""
    config = config or GatewayConfig(**kw)
    ctx = zmq.asyncio.Context()
    directory = Directory(ctx, BusConfig(mdns=False))
    peers = Peers(ctx, directory, "gw-test")
    backend = Backend(directory, peers, 30.0, Metrics(), carry_s=0.0)
    client = TestClient(TestServer(build_app(backend, config), host=config.host))
    await client.start_server()
    try:
        yield client, directory
    finally:
        await client.close()
        ctx.destroy(linger=0)
