"""A service started for one test and stopped after it, and an RPC client of it over loopback."""

from __future__ import annotations

import contextlib

import zmq.asyncio

from bus.client import RpcClient


@contextlib.asynccontextmanager
async def running(service):
    await service.start()
    try:
        yield service
    finally:
        service.stop()
        await service.shutdown()


@contextlib.asynccontextmanager
async def client_of(service):
    c = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{service.rpc_port}")
    try:
        yield c
    finally:
        await c.close()
