"""Finding (the known hang): a raw scheduler.generate frame with a huge string (just over the
1 MiB a header may be) got no reply within 30 s: ZeroMQ dropped it unread. Control sockets read
frames up to 4 MiB, so such a frame is answered with a typed `bad_frame` naming the call."""

from __future__ import annotations

import asyncio

import msgpack
import zmq
import zmq.asyncio

import wire
from bus.config import BusConfig, ServiceConfig
from services.echo.service import EchoService
from wire.limits import MAX_HEADER_BYTES, VERSION
from wire.messages.scheduler import Generate

from ..bus.serving import running


def raw_generate(mid: int, prompt: str) -> bytes:
    return msgpack.packb({"version": VERSION, "type": Generate.TYPE, "id": mid, "sender": "raw",
                          "epoch": 1, "deadline": 0.0,
                          "body": {"prompt": prompt, "max_tokens": 1}})


async def test_a_frame_over_the_header_limit_gets_a_typed_reply():
    ctx = zmq.asyncio.Context.instance()
    config = ServiceConfig(name="echo-big", kind="echo", discover=False,
                           bus=BusConfig(cluster="big", mdns=False))
    async with running(EchoService(config, ctx=ctx)) as svc:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://127.0.0.1:{svc.rpc_port}")
        try:
            for mid, size in ((7, (1 << 20) + 1), (8, 3_900_000)):
                frame = raw_generate(mid, "x" * size)
                assert len(frame) > MAX_HEADER_BYTES
                await sock.send_multipart([frame])
                reply = wire.decode(await asyncio.wait_for(sock.recv_multipart(), 30))
                assert reply.id == mid and reply.body.code == "bad_frame"
                assert "limit" in reply.body.message
        finally:
            sock.close()
