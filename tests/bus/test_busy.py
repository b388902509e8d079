"""The cap on requests a service handles at once, over real sockets on loopback: past it new
requests get a typed `busy` with retry_after, streams count, and bus.* is always answered."""

from __future__ import annotations

import asyncio

import pytest

import wire
from bus.config import BusConfig, ServiceConfig
from bus.errors import RemoteError
from bus.service import Service, handles, streams
from wire.messages.bus import Echo, EchoReply, Hello, Status, StatusReply, Welcome

from .waiting import wait_until
from .serving import client_of

CAP = 2


@wire.message("test.hold")
class Hold:
    """Held until the test releases it."""


@wire.message("test.hold_stream")
class HoldStream:
    """One reply, then held until the test releases it."""


class Holder(Service):
    kind = "test"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.release = asyncio.Event()

    @handles(Hold)
    async def hold(self, msg):
        await self.release.wait()
        return EchoReply(text="released")

    @streams(HoldStream)
    async def hold_stream(self, msg):
        yield EchoReply(text="first")
        await self.release.wait()
        yield EchoReply(text="last")


@pytest.fixture
async def service():
    s = Holder(ServiceConfig(name="holder", kind="test", max_requests=CAP,
                             bus=BusConfig(cluster="busy-test", mdns=False)))
    await s.start()
    yield s
    s.release.set()
    s.stop()
    await s.shutdown()


@pytest.fixture
async def client(service):
    async with client_of(service) as c:
        yield c


def test_the_cap_is_validated():
    with pytest.raises(ValueError, match="max_requests"):
        ServiceConfig(name="x", kind="test", max_requests=0)


async def test_past_the_cap_new_requests_are_refused_busy_and_bus_methods_still_answer(service, client):
    held = [asyncio.create_task(client.call(Hold(), timeout=10)) for _ in range(CAP)]
    await wait_until(lambda: service.load == CAP)
    with pytest.raises(RemoteError) as e:
        await client.call(Hold(), timeout=5)
    assert e.value.code == "busy" and e.value.retry_after > 0
    assert isinstance(await client.call(Hello(cluster="busy-test")), Welcome)
    status = await client.call(Status())
    assert isinstance(status, StatusReply) and status.counters["errors.busy"] == 1
    assert (await client.call(Echo(text="echo"))).text == "echo"
    service.release.set()
    assert [(await h).text for h in held] == ["released"] * CAP
    await wait_until(lambda: service.load == 0)
    assert (await client.call(Hold(), timeout=5)).text == "released"   # room again


async def test_open_streams_count_against_the_cap(service, client):
    streams_ = [client.stream(HoldStream(), idle_timeout=10) for _ in range(CAP)]
    for s in streams_:
        assert (await anext(s)).text == "first"
    with pytest.raises(RemoteError) as e:
        await client.call(Hold(), timeout=5)
    assert e.value.code == "busy"
    with pytest.raises(RemoteError) as e:
        await anext(client.stream(HoldStream(), idle_timeout=5))
    assert e.value.code == "busy"
    service.release.set()
    for s in streams_:
        assert [r.text async for r in s] == ["last"]


async def test_a_refused_request_leaves_nothing_running(service, client):
    held = [asyncio.create_task(client.call(Hold(), timeout=10)) for _ in range(CAP)]
    await wait_until(lambda: service.load == CAP)
    for _ in range(20):
        with pytest.raises(RemoteError):
            await client.call(Hold(), timeout=5)
    assert service.load == CAP
    service.release.set()
    await asyncio.gather(*held)
