"""A real service process never allocates a frame over its socket's limit: the peer that sends
one is disconnected when the frame's length arrives, and the service goes on serving."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

import wire
from bus.client import RpcClient
from wire.messages.bus import Echo, Status

from .procs import cli, free_port, unique_cluster

pytestmark = pytest.mark.slow

FRAME = 256 << 20            # far past the 1 MiB a control socket takes


def peak_rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


async def disconnected(monitor) -> None:
    while parse_monitor_message(await monitor.recv_multipart())["event"] != zmq.EVENT_DISCONNECTED:
        pass


async def test_a_frame_over_the_limit_is_never_allocated_by_the_receiver(procs):
    port = free_port()
    p = procs.start(cli("run", "echo", "--name", "small", "--cluster", unique_cluster(),
                        "--no-mdns", "--rpc-port", str(port)))
    ctx = zmq.asyncio.Context.instance()
    c = RpcClient(ctx, f"tcp://127.0.0.1:{port}")
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    monitor = raw.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        await c.call(Status(), timeout=60)        # up and serving
        before = peak_rss_bytes(p.pid)
        raw.connect(f"tcp://127.0.0.1:{port}")
        header = wire.encode(wire.Message(Echo(payload=wire.Tensor(np.zeros(1, np.uint8), "raw"))))[0]
        # np.zeros maps untouched pages: the sender does not hold 256 MiB either.
        await raw.send_multipart([header, np.zeros(FRAME, np.uint8)], copy=False)
        # Hung up on (the frame refused), or answered bad_frame (the frame read): whichever first.
        hung_up = asyncio.create_task(disconnected(monitor))
        answered = asyncio.ensure_future(raw.recv_multipart())
        await asyncio.wait([hung_up, answered], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        for t in (hung_up, answered):
            t.cancel()
        await asyncio.gather(hung_up, answered, return_exceptions=True)
        assert (await c.call(Echo(text="still here"), timeout=10)).text == "still here"
        grown = peak_rss_bytes(p.pid) - before
        assert grown < FRAME // 8, f"peak RSS grew by {grown >> 20} MiB"
        assert hung_up.done() and not hung_up.cancelled(), "the peer was not hung up on"
    finally:
        raw.disable_monitor()
        monitor.close()
        raw.close()
        await c.close()
