"""One-way messages over real sockets on loopback: `RpcClient.tell` and a `receives` handler.
Nothing is answered, a handler that raises is counted and the service goes on, a service at its
cap of requests still takes them, and a peer the directory does not know gets nothing."""

from __future__ import annotations

import asyncio

import pytest
import zmq.asyncio

import wire
from bus.client import RpcClient
from bus.config import BusConfig, ServiceConfig
from bus.directory import Directory
from bus.dispatch import receives
from bus.peers import Peers
from bus.service import Service, handles
from wire.messages.bus import EchoReply

from .serving import client_of, running
from .waiting import wait_until


@wire.message("test.note")
class Note:
    text: str


@wire.message("test.wait")
class Wait:
    """Held until the test releases it."""


class Taker(Service):
    kind = "test"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.notes: list[str] = []
        self.release = asyncio.Event()

    @receives(Note)
    def note(self, msg):
        if msg.body.text == "boom":
            raise RuntimeError("a handler bug")
        self.notes.append(msg.body.text)

    @handles(Wait)
    async def wait(self, msg):
        await self.release.wait()
        return EchoReply(text="released")


def taker(cap: int = 8) -> Taker:
    return Taker(ServiceConfig(name="taker", kind="test", max_requests=cap,
                               bus=BusConfig(cluster="one-way-test", mdns=False)))


async def test_told_messages_are_handled_in_order_and_answered_by_nothing():
    async with running(taker()) as s, client_of(s) as c:
        assert all(c.tell(Note(text=str(i))) for i in range(50))
        await wait_until(lambda: len(s.notes) == 50)
        assert s.notes == [str(i) for i in range(50)]
        # Nothing came back: no reply was waited for, none arrived and was dropped as stale.
        await asyncio.sleep(0)
        assert c.stale_dropped == 0 and not c._pending


async def test_a_handler_that_raises_is_counted_and_the_next_message_is_handled():
    async with running(taker()) as s, client_of(s) as c:
        assert c.tell(Note(text="boom")) and c.tell(Note(text="after"))
        await wait_until(lambda: s.notes == ["after"])
        assert s.counters["errors.one_way"] == 1


async def test_a_service_at_its_cap_still_takes_one_way_messages():
    async with running(taker(cap=1)) as s, client_of(s) as c:
        held = asyncio.create_task(c.call(Wait(), timeout=10))
        await wait_until(lambda: s.load == 1)
        assert c.tell(Note(text="past the cap"))
        await wait_until(lambda: s.notes == ["past the cap"])
        s.release.set()
        assert (await held).text == "released"


async def test_telling_a_peer_the_directory_does_not_know_sends_nothing():
    ctx = zmq.asyncio.Context.instance()
    d = Directory(ctx, BusConfig(cluster="one-way-test", mdns=False), me="teller")
    peers = Peers(ctx, d, me="teller")
    try:
        assert peers.tell("nobody", Note(text="lost")) is False
        assert peers._clients == {}
    finally:
        await peers.close()


async def test_a_peer_that_takes_nothing_makes_tell_say_so_without_waiting():
    from bus.sockets import SocketLimits
    # Nobody listens there: the queue toward it fills, and then tell drops and says so.
    c = RpcClient(zmq.asyncio.Context.instance(), "tcp://127.0.0.1:9",
                  limits=SocketLimits(sndhwm=2))
    try:
        told = [c.tell(Note(text=str(i))) for i in range(50)]
        assert told.count(False) > 0 and told[-1] is False
    finally:
        await c.close()
