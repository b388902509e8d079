"""CURVE over real sockets on loopback, one keyed service in this process: only holders of the
cluster key are answered, hear events, or get through a handshake; without a key, today's bus."""

from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio

import wire
from bus import zap
from bus.client import RpcClient
from bus.config import BusConfig, ServiceConfig
from bus.curve import new_key
from bus.directory import Directory
from bus.errors import CallTimeout
from bus.handshakes import reason
from bus.sockets import BindError
from services.echo.service import EchoService
from wire.messages.bus import Echo

from tests.conftest import require
from ..waiting import until
from .curve_heard import heartbeats_heard
from .serving import running


@pytest.fixture(autouse=True)
def curve_here():
    require(zmq.has("curve"), "this libzmq has no CURVE")


KEY = new_key() if zmq.has("curve") else None     # else every test fails (CI) or skips
OTHER = new_key() if zmq.has("curve") else None
NO_ANSWER_S = 1.0


def config(name: str, key, peers=()) -> ServiceConfig:
    return ServiceConfig(name=name, kind="echo", discover=bool(peers),
                         bus=BusConfig(cluster="curve", mdns=False, key=key, peers=tuple(peers),
                                       heartbeat_interval=0.1))


@pytest.fixture
async def keyed():
    async with running(EchoService(config("keyed", KEY), ctx=zmq.asyncio.Context.instance())) as s:
        yield s


async def echo(service, key) -> str:
    """'answered' or 'silent': one echo call to `service` as a client holding `key`."""
    c = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{service.rpc_port}", key=key)
    try:
        reply = await c.call(Echo(text="hi"), timeout=NO_ANSWER_S)
        assert reply.text == "hi"
        return "answered"
    except CallTimeout:
        return "silent"
    finally:
        await c.close()


async def impostor_echo(service) -> str:
    """One echo call from a client that knows the cluster's public key but not its pair."""
    sock = zmq.asyncio.Context.instance().socket(zmq.DEALER)
    sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
    sock.curve_serverkey = KEY.public
    sock.connect(f"tcp://127.0.0.1:{service.rpc_port}")
    try:
        # Bounded: once ZAP has refused the handshake the socket has no pipe and takes nothing
        # (the refusal can come before the send when this thread is descheduled after connect).
        await asyncio.wait_for(sock.send_multipart(wire.encode(wire.Message(body=Echo(text="hi"), id=1))),
                               NO_ANSWER_S)
        return "answered" if await sock.poll(NO_ANSWER_S * 1000) else "silent"
    except asyncio.TimeoutError:
        return "silent"
    finally:
        sock.close(linger=0)


async def test_only_a_holder_of_the_cluster_key_is_answered_and_the_service_says_why(keyed, caplog):
    outcomes = await asyncio.gather(echo(keyed, KEY), echo(keyed, None), echo(keyed, OTHER),
                                    impostor_echo(keyed))
    assert outcomes == ["answered", "silent", "silent", "silent"]
    # The impostor's cipher was sound: the ZAP handler turned it away, and counted it.
    assert zap.refused(keyed.ctx) >= 1
    # Each of the three was refused for its own reason, each said once in the log.
    await until(lambda: keyed.counters["handshakes_refused"] >= 3, timeout=10,
                what="three reasons said")
    said = "\n".join(r.getMessage() for r in caplog.records if r.name == "llmbus.bus")
    for why in ("without a key file", "another cluster's key", "not its key pair"):
        assert why in said, said


async def test_a_client_refused_by_zap_gets_call_timeout_from_every_later_call(keyed, monkeypatch):
    """libzmq drops a refused client's pipe and never reconnects it: its socket takes nothing
    more. A call must still end at its timeout (it once waited on the send forever)."""
    import bus.client
    plain_socket = bus.client.make_socket

    def impostor_socket(ctx, kind, limits, key):
        sock = plain_socket(ctx, kind, limits, None)
        sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
        sock.curve_serverkey = KEY.public
        return sock

    monkeypatch.setattr(bus.client, "make_socket", impostor_socket)
    ctx = zmq.asyncio.Context.instance()
    before = zap.refused(ctx)
    c = RpcClient(ctx, f"tcp://127.0.0.1:{keyed.rpc_port}", key=KEY)
    try:
        await until(lambda: zap.refused(ctx) > before, timeout=10, what="the handshake refused")
        # The refusal is counted on the server before the client has dropped its pipe: the
        # first calls may still be taken by that pipe and then get no reply. Every call ends at
        # its own timeout, none hangs, and once the pipe is gone the socket takes nothing.
        ends = []
        while not ends or ends[-1] != "not sent":
            assert len(ends) < 20, ends
            with pytest.raises(CallTimeout, match=r"(not sent|no reply to bus\.echo) within 0\.3s") as e:
                await asyncio.wait_for(c.call(Echo(text="hi"), timeout=0.3), 10)
            ends.append("not sent" if "not sent" in str(e.value) else "no reply")
        with pytest.raises(CallTimeout, match="not sent within 0.3s"):
            await asyncio.wait_for(c.call(Echo(text="hi"), timeout=0.3), 10)
    finally:
        await c.close()


async def test_only_a_holder_of_the_key_hears_heartbeats(keyed):
    heard = await heartbeats_heard(f"tcp://127.0.0.1:{keyed.pub_port}", KEY,
                                   {"plain": None, "other": OTHER}, enough=5, timeout=10)
    assert heard["plain"] == 0 and heard["other"] == 0, heard


async def test_a_directory_confirms_a_keyed_service_only_with_the_key(keyed):
    ctx = zmq.asyncio.Context.instance()
    peer = (f"127.0.0.1:{keyed.rpc_port}",)
    dirs = {who: Directory(ctx, BusConfig(cluster="curve", mdns=False, peers=peer, key=key,
                                          heartbeat_interval=0.1), me=f"dir-{who}")
            for who, key in (("member", KEY), ("plain", None), ("other", OTHER))}
    for d in dirs.values():
        await d.start()
    try:
        await until(lambda: dirs["member"].get("keyed"), timeout=10, what="member sees keyed")
        # Each of the others has had a handshake time out by now (1 s each, side by side).
        await until(lambda: all(d.counters["handshake_failures"] for w, d in dirs.items()
                                if w != "member"), timeout=10, what="handshakes refused")
        assert dirs["plain"].live() == [] and dirs["other"].live() == []
        assert "give the key file" in dirs["plain"].explain()
        assert "CURVE is on here" in dirs["other"].explain()
    finally:
        for d in dirs.values():
            await d.stop()


async def test_a_keyed_service_does_not_call_a_plain_one(caplog):
    """Both directions fail: the plain service cannot call the keyed one (above), nor this one it."""
    ctx = zmq.asyncio.Context.instance()
    async with running(EchoService(config("plain", None), ctx=ctx)) as plain:
        async with running(EchoService(config("caller", KEY, peers=[f"127.0.0.1:{plain.rpc_port}"]),
                                       ctx=ctx)) as caller:
            d = caller.directory
            await until(lambda: d.counters["handshake_failures"], timeout=10, what="a refused handshake")
            assert d.get("plain") is None
            assert "CURVE is on here" in d.explain()
            # The plain service says why it turned the caller away.
            await until(lambda: plain.counters["handshakes_refused"], timeout=10, what="said")
            assert any("this service has no key file" in r.getMessage() for r in caplog.records)


async def test_without_a_key_services_talk_as_before():
    ctx = zmq.asyncio.Context.instance()
    async with running(EchoService(config("open", None), ctx=ctx)) as s:
        assert await echo(s, None) == "answered"


@pytest.mark.parametrize("event, value, keyed, words", [
    (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH, True,
     "without a key file"),
    (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH, False,
     "this service has no key file"),
    (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC, True,
     "another cluster's key"),
    (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400, True, "ZAP status 400"),
    (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, 0, True, "zmq event"),
])
def test_each_refused_handshake_is_named_for_the_person_reading_the_log(event, value, keyed, words):
    assert words in reason(event, value, keyed)


async def test_a_keyed_service_that_cannot_bind_leaves_no_zap_handler_behind(keyed):
    ctx = zmq.asyncio.Context.instance()
    clash = EchoService(ServiceConfig(name="clash", kind="echo", rpc_port=keyed.rpc_port,
                                      bus=BusConfig(cluster="curve", mdns=False, key=OTHER)), ctx=ctx)
    with pytest.raises(BindError, match="cannot bind"):
        await clash.start()
    # The failed start took back its key: only the running service's is admitted.
    assert zap.admitted(ctx) == (KEY.public,)
    assert await echo(keyed, KEY) == "answered"
