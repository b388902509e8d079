"""Size limits over real sockets on loopback: what is too large to send is refused at once with a
typed error, what arrives too large is dropped unread, and the service keeps serving."""

from __future__ import annotations

import asyncio
import contextlib

import msgpack
import numpy as np
import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

import wire
from bus.client import RpcClient
from bus.config import BusConfig, ServiceConfig
from bus.errors import BadReply, MessageTooLarge, RemoteError
from bus.service import Service, handles, streams
from bus.sockets import ACTIVATIONS, CONTROL, limits_for_kind
from wire.limits import MAX_HEADER_BYTES
from wire.messages.bus import Echo, EchoReply, Status

from .waiting import wait_until
from .serving import client_of, running


@wire.message("test.big_reply")
class BigReply:
    text_bytes: int = 0        # the reply's text
    frame_bytes: int = 0       # the reply's tensor payload


@wire.message("test.big_stream")
class BigStream:
    small: int                 # replies that fit, then one that does not


class Sizes(Service):
    kind = "test"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.closed = 0        # streams whose generator ran its finally

    @handles(BigReply)
    async def big(self, msg):
        b = msg.body
        payload = wire.Tensor(np.zeros(b.frame_bytes, np.uint8), "raw") if b.frame_bytes else None
        return EchoReply(text="x" * b.text_bytes, payload=payload)

    @streams(BigStream)
    async def big_stream(self, msg):
        try:
            for i in range(msg.body.small):
                yield EchoReply(text=str(i))
            yield EchoReply(text="x" * (MAX_HEADER_BYTES + 1))
            yield EchoReply(text="never sent")
        finally:
            self.closed += 1


class BigSizes(Sizes):
    request_limits = ACTIVATIONS


def config(name: str) -> ServiceConfig:
    return ServiceConfig(name=name, kind="test", bus=BusConfig(cluster="limits-test", mdns=False))


@pytest.fixture
async def service():
    async with running(Sizes(config("sizes"))) as s:
        yield s


@pytest.fixture
async def client(service):
    async with client_of(service) as c:
        yield c


def test_only_shards_take_large_frames():
    assert limits_for_kind("shard") is ACTIVATIONS
    for kind in ("tokenizer", "scheduler", "echo", "health", "gateway"):
        assert limits_for_kind(kind) is CONTROL
    assert CONTROL.max_msg_size == MAX_HEADER_BYTES
    # a 512-token batch of a big model's activations fits one frame
    assert ACTIVATIONS.max_msg_size >= 512 * 8192 * 4


async def test_a_header_over_the_limit_is_refused_at_once_not_at_the_timeout(client):
    huge = Echo(text="x" * MAX_HEADER_BYTES)
    with pytest.raises(MessageTooLarge, match="header"):
        await asyncio.wait_for(client.call(huge, timeout=30), 5)
    with pytest.raises(MessageTooLarge, match="header"):
        await asyncio.wait_for(anext(client.stream(huge)), 5)
    assert client._pending == {}
    assert (await client.call(Echo(text="after"))).text == "after"


async def test_a_frame_over_the_sockets_limit_is_refused_before_it_leaves(service, client):
    big = np.zeros(CONTROL.max_msg_size + 1, np.uint8)
    with pytest.raises(MessageTooLarge, match="frame 1"):
        await asyncio.wait_for(client.call(Echo(payload=wire.Tensor(big, "raw")), timeout=30), 5)
    status = await client.call(Status())
    assert status.counters["requests"] == 1   # the refused call never reached the service


async def test_a_shard_sized_socket_carries_a_batch_of_big_activations():
    s = BigSizes(config("big"))
    await s.start()
    c = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{s.rpc_port}",
                  limits=ACTIVATIONS)
    try:
        x = np.random.default_rng(0).standard_normal((512, 8192)).astype(np.float32)
        back = await c.call(Echo(payload=wire.Tensor(x, "fp32")), timeout=30)
        np.testing.assert_array_equal(back.payload.array(), x)
    finally:
        await c.close()
        s.stop()
        await s.shutdown()


@pytest.mark.parametrize("what,field", [("header", "text_bytes"), ("frame", "frame_bytes")])
async def test_a_reply_too_large_to_send_answers_too_large(service, client, what, field):
    with pytest.raises(RemoteError) as e:
        await asyncio.wait_for(client.call(BigReply(**{field: MAX_HEADER_BYTES + 1}), timeout=30), 5)
    assert e.value.code == "too_large" and what in e.value.message
    assert (await client.call(BigReply(text_bytes=10))).text == "x" * 10
    assert service.counters["errors.too_large"] == 1


async def test_a_stream_item_too_large_ends_the_stream_typed_and_closes_the_handler(service, client):
    got = []
    with pytest.raises(RemoteError) as e:
        async for r in client.stream(BigStream(small=3), idle_timeout=5):
            got.append(r.text)
    assert got == ["0", "1", "2"] and e.value.code == "too_large"
    await wait_until(lambda: service.closed == 1)


async def test_an_oversized_frame_is_dropped_unread_and_the_service_keeps_serving(service, client):
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.DEALER)          # no MAXMSGSIZE of its own: a hostile or buggy peer
    raw.setsockopt(zmq.LINGER, 0)
    monitor = raw.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
    try:
        raw.connect(f"tcp://127.0.0.1:{service.rpc_port}")
        header = wire.encode(wire.Message(Echo(payload=wire.Tensor(np.zeros(1, np.uint8), "raw")),
                                          id=5))[0]
        # A sound header naming one 8 MiB payload frame: past the control socket's 1 MiB.
        await raw.send_multipart([header, np.zeros(8 << 20, np.uint8)], copy=False)

        async def event(kind):
            while True:
                if parse_monitor_message(await monitor.recv_multipart())["event"] == kind:
                    return
        await asyncio.wait_for(event(zmq.EVENT_CONNECTED), 5)
        await asyncio.wait_for(event(zmq.EVENT_DISCONNECTED), 5)  # the service hung up on it
    finally:
        raw.disable_monitor()
        monitor.close()
        raw.close()
    status = await client.call(Status())
    assert status.counters["requests"] == 1 and status.counters.get("bad_frames", 0) == 0
    assert (await client.call(Echo(text="still here"))).text == "still here"


async def test_a_reply_that_cannot_be_decoded_fails_its_call_at_once():
    ctx = zmq.asyncio.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")

    async def answer_with_an_unknown_type():
        ident, *frames = await router.recv_multipart()
        req = wire.decode(frames)
        bad = {"version": 1, "type": "no.such", "id": req.id, "sender": "impostor", "epoch": 1,
               "deadline": 0.0, "body": {}}
        await router.send_multipart([ident, msgpack.packb(bad)])

    task = asyncio.create_task(answer_with_an_unknown_type())
    c = RpcClient(ctx, f"tcp://127.0.0.1:{port}")
    try:
        with pytest.raises(BadReply, match="unknown_type"):
            await asyncio.wait_for(c.call(Echo(), timeout=30), 5)
        assert c.bad_frames == 1
    finally:
        await task
        await c.close()
        router.close()
