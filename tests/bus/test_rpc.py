"""Request/reply over real sockets on loopback, one service in this process."""

from __future__ import annotations

import asyncio
import time

import msgpack
import numpy as np
import pytest
import zmq
import zmq.asyncio

import wire
from bus.client import RpcClient
from bus.config import BusConfig, ServiceConfig
from bus.directory import Directory
from bus.errors import CallTimeout, ClientClosed, PeerRestarted, RemoteError
from bus.service import Service, handles
from wire.messages.bus import Echo, EchoReply, Error, Status, StatusReply, Welcome

from ..waiting import until
from .serving import client_of, running


@wire.message("test.boom")
class Boom:
    text: str = ""


@wire.message("test.slow")
class Slow:
    seconds: float


class ProbeService(Service):
    kind = "test"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.slow_started = asyncio.Event()     # a Slow request is being handled

    @handles(Boom)
    async def boom(self, msg):
        raise RuntimeError("handler bug")

    @handles(Slow)
    async def slow(self, msg):
        self.slow_started.set()
        await asyncio.sleep(msg.body.seconds)
        return EchoReply(text="slept")


def config(name="svc", **kw) -> ServiceConfig:
    return ServiceConfig(name=name, kind="test", bus=BusConfig(cluster="rpc-test", mdns=False), **kw)


@pytest.fixture
async def service():
    async with running(ProbeService(config(), ctx=zmq.asyncio.Context.instance())) as s:
        yield s


@pytest.fixture
async def client(service):
    async with client_of(service) as c:
        yield c


async def test_echo_carries_a_tensor_and_the_handshake_names_the_service(service, client):
    w = await client.handshake("rpc-test")
    assert isinstance(w, Welcome) and w.name == "svc" and w.epoch == service.epoch
    x = np.random.default_rng(0).standard_normal((4, 576)).astype(np.float32)
    reply = await client.call(Echo(text="hi", payload=wire.Tensor(x, "fp32")))
    assert reply.text == "hi"
    np.testing.assert_array_equal(reply.payload.array(), x)


async def test_unknown_method_is_a_typed_error(client):
    with pytest.raises(RemoteError) as e:
        await client.call(Error(code="x", message="not a request"))
    assert e.value.code == "unknown_method"


async def test_handler_bug_answers_internal_and_the_loop_goes_on(service, client):
    with pytest.raises(RemoteError) as e:
        await client.call(Boom())
    assert e.value.code == "internal" and "handler bug" in e.value.message
    assert (await client.call(Echo(text="still here"))).text == "still here"


async def test_bad_frames_are_counted_answered_and_never_stop_the_loop(service, client):
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(f"tcp://127.0.0.1:{service.rpc_port}")
    garbage = [
        [b"\xc1\xc1\xc1"],                                           # not msgpack
        [msgpack.packb({"version": 1})],                              # wrong schema
        [msgpack.packb({"version": 1, "type": "no.such", "id": 1, "sender": "x", "epoch": 1,
                        "deadline": 0.0, "body": {}})],               # unknown type
        [wire.encode(wire.Message(Echo(text="x")))[0], b"extra"],     # frame count
    ]
    for frames in garbage:
        await raw.send_multipart(frames)
        reply = wire.decode(await asyncio.wait_for(raw.recv_multipart(), 2))
        assert isinstance(reply.body, Error) and reply.body.code == "bad_frame"
    raw.close()
    status = await client.call(Status())
    assert isinstance(status, StatusReply)
    assert status.counters["bad_frames"] == len(garbage)
    assert status.counters["bad_frames.unknown_type"] == 1


async def test_request_past_its_deadline_is_refused(service):
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(f"tcp://127.0.0.1:{service.rpc_port}")
    await raw.send_multipart(wire.encode(wire.Message(Echo(), id=7, deadline=time.time() - 1)))
    reply = wire.decode(await asyncio.wait_for(raw.recv_multipart(), 2))
    raw.close()
    assert reply.id == 7 and reply.body.code == "deadline_exceeded"


async def test_draining_finishes_work_in_flight_and_refuses_new_work():
    s = ProbeService(config("drainer"))
    await s.start()
    c = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{s.rpc_port}")
    slow = asyncio.create_task(c.call(Slow(seconds=0.5)))
    await asyncio.wait_for(s.slow_started.wait(), 5)          # the slow call is in flight
    s.stop()
    with pytest.raises(RemoteError) as e:
        await c.call(Slow(seconds=0))
    assert e.value.code == "draining" and e.value.retry_after
    shutdown = asyncio.create_task(s.shutdown())
    assert (await slow).text == "slept"
    await shutdown
    assert s.state == "stopped"
    await c.close()


async def _impostor(epoch_of_reply):
    """A real ROUTER that answers every request with the given epochs, in order."""
    ctx = zmq.asyncio.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")

    async def serve():
        for epoch in epoch_of_reply:
            ident, *frames = await router.recv_multipart()
            req = wire.decode(frames)
            rep = req.reply(EchoReply(text=f"epoch {epoch}"), "impostor", epoch)
            await router.send_multipart([ident] + [bytes(f) for f in wire.encode(rep)])

    return router, port, asyncio.create_task(serve())


async def test_replies_from_an_old_epoch_are_dropped_and_counted():
    router, port, task = await _impostor([200, 100, 200])
    c = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{port}")
    assert (await c.call(Echo())).text == "epoch 200"
    assert c.peer_epoch == 200
    with pytest.raises(CallTimeout):
        await c.call(Echo(), timeout=0.5)           # answered from epoch 100: stale, dropped
    assert c.stale_dropped == 1
    assert (await c.call(Echo())).text == "epoch 200"
    await task
    await c.close()
    router.close()


async def test_a_new_epoch_fails_calls_sent_to_the_old_one_at_once():
    router, port, task = await _impostor([])
    c = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{port}")
    c.saw_epoch(10)
    pending = asyncio.create_task(c.call(Echo(), timeout=5))
    await asyncio.wait_for(router.recv_multipart(), 5)        # sent to epoch 10: in flight
    c.saw_epoch(11)
    with pytest.raises(PeerRestarted):
        await pending
    await c.close()
    router.close()


async def test_a_call_addressed_to_the_new_epoch_takes_its_answer():
    """A shard hands a batch on to the epoch its route names, which may be newer than the one its
    client has heard of: the answer from that epoch is the answer, where a call that did not say
    which epoch it addressed ends as PeerRestarted (the answer came from a process it did not
    send to)."""
    router, port, task = await _impostor([11, 12])
    c = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{port}")
    c.saw_epoch(10)
    assert (await c.call(Echo(), timeout=5, epoch=11)).text == "epoch 11"
    assert c.peer_epoch == 11 and c.stale_dropped == 0
    with pytest.raises(PeerRestarted):
        await c.call(Echo(), timeout=5)           # sent to 11, answered by 12
    await task
    await c.close()
    router.close()


async def test_directory_finds_a_static_peer_and_expires_it_after_missed_heartbeats(service):
    ctx = zmq.asyncio.Context.instance()
    bus = BusConfig(cluster="rpc-test", mdns=False, peers=(f"127.0.0.1:{service.rpc_port}",))
    d = Directory(ctx, bus, me="watcher")
    await d.start()
    try:
        e = await d.wait_for("svc", 3)
        assert e.epoch == service.epoch and e.source == "static"
        confirmed_at = e.last_seen
        # Staying alive is what is tested, so this sleep stays: twice the dead-after time, past
        # which the handshake alone (once per epoch) would have let the entry expire.
        await asyncio.sleep(2 * bus.dead_after)
        alive = d.get("svc")
        assert alive is not None and alive.source == "static"
        assert alive.last_seen > confirmed_at + bus.dead_after      # refreshed by heartbeats
        service.heartbeat_task.cancel()                 # heartbeats stop; the socket still answers
        stopped = time.monotonic()
        await until(lambda: d.get("svc") is None, timeout=bus.dead_after + 2, what="expiry")
        # Dead after three missed heartbeats, not sooner (the last one left at most one interval
        # before the cancel).
        assert time.monotonic() - stopped >= bus.dead_after - bus.heartbeat_interval
        # The socket still answers handshakes, yet the directory does not bring the peer back:
        # staying dead across the static-peer loop's rounds is what is tested.
        await asyncio.sleep(3 * bus.heartbeat_interval)
        assert d.get("svc") is None and "svc" not in [x.name for x in d.live()]
    finally:
        await d.stop()


async def test_wrong_cluster_is_refused_with_a_reason(service):
    ctx = zmq.asyncio.Context.instance()
    bus = BusConfig(cluster="other", mdns=False, peers=(f"127.0.0.1:{service.rpc_port}",))
    d = Directory(ctx, bus, me="watcher")
    await d.start()
    try:
        await until(lambda: "belongs to cluster 'rpc-test'" in d.explain(), what="the refusal")
        assert d.live() == [] and d.counters["wrong_cluster"] >= 1
    finally:
        await d.stop()


async def test_a_call_whose_body_breaks_the_schema_gets_bad_frame_not_a_timeout(client):
    from wire.messages.bus import Probe
    with pytest.raises(RemoteError) as e:
        await client.call(Probe(target="x", timeout=100.0), timeout=2.0)  # check(): at most 60
    assert e.value.code == "bad_frame" and "timeout must be within" in e.value.message


async def test_start_call_sends_before_it_returns_and_its_awaitable_answers(service, client):
    reply = client.start_call(Slow(seconds=0.0), timeout=5)
    # Nothing awaits the reply yet: the request is on its way all the same.
    await until(service.slow_started.is_set, timeout=5)
    assert (await reply).text == "slept"


async def test_start_call_on_a_closed_client_raises_when_awaited(service):
    async with client_of(service) as c:
        pass
    reply = c.start_call(Echo(text="late"))
    with pytest.raises(ClientClosed):
        await reply
