"""Discovery under a flood of forged mDNS records, and a name held by a live peer.

The 2,000 forged records are fed to the directory's discovery entry point (`_on_candidate`, what
the mDNS browser calls with each resolved record) rather than registered with zeroconf: real
registration probes each name for ~1 s, and what is under test is what the directory does with
what mDNS tells it. Each forged record points at a loopback address where nothing listens, so
its handshake can only time out, as an attacker's would."""

from __future__ import annotations

import asyncio
import os

import zmq.asyncio

from bus import directory as directory_module
from bus.config import BusConfig, ServiceConfig
from bus.directory import Directory
from bus.liveness import LivenessTable, PeerEntry
from bus.mdns import Candidate
from services.echo.service import EchoService

from ..bus.procs import unique_cluster
from ..bus.serving import running
from ..waiting import until

FORGED = 2000


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def forged(cluster: str, i: int) -> Candidate:
    return Candidate(cluster=cluster, name=f"shard-{i}", kind="shard", instance=str(i),
                     epoch=i + 1, host=f"127.77.{i // 250}.{i % 250 + 1}", rpc_port=9, pub_port=10)


async def test_2000_forged_records_leave_discovery_working_with_bounded_sockets_and_errors():
    cluster = unique_cluster()
    real = EchoService(ServiceConfig(name="real-echo", kind="echo",
                                     bus=BusConfig(cluster=cluster, mdns=False)))
    async with running(real):
        d = Directory(zmq.asyncio.Context.instance(), BusConfig(cluster=cluster, mdns=False),
                      me="flooded")
        await d.start()
        fds_before, peak = open_fds(), {"fds": 0, "handshakes": 0}

        async def sample():
            while True:
                peak["fds"] = max(peak["fds"], open_fds() - fds_before)
                peak["handshakes"] = max(peak["handshakes"], len(d._confirming))
                await asyncio.sleep(0.02)

        sampler = asyncio.get_running_loop().create_task(sample())
        try:
            for i in range(FORGED):
                d._on_candidate(forged(cluster, i))
            # The real service announces itself after the flood: found within seconds.
            d._on_candidate(Candidate(cluster=cluster, name="real-echo", kind="echo",
                                      instance="0", epoch=real.epoch, host="127.0.0.1",
                                      rpc_port=real.rpc_port, pub_port=real.pub_port))
            await d.wait_for("real-echo", 10)
            # Forged handshakes go on failing, one bounded batch after another.
            await until(lambda: d.counters["handshake_failures"] >= 4 * directory_module.MAX_HANDSHAKES
                        if hasattr(directory_module, "MAX_HANDSHAKES") else
                        d.counters["handshake_failures"] >= 100, 30, what="forged handshakes failing")
            assert d.get("real-echo") is not None          # and it stays, by its heartbeats
        finally:
            sampler.cancel()
            await d.stop()
        assert peak["handshakes"] <= 16, peak
        assert peak["fds"] < 100, peak                     # a socket (eventfd) per handshake
        assert len(d.last_errors) <= 64, len(d.last_errors)
        assert d.candidates_waiting <= 256


def entry(epoch: int, port: int) -> PeerEntry:
    return PeerEntry(name="shard-0", kind="shard", instance="0", epoch=epoch, host="10.0.0.1",
                     rpc_port=port, pub_port=port + 1)


def test_a_newer_epoch_at_another_endpoint_is_a_clash_while_the_holder_lives():
    t = LivenessTable(dead_after=1.5)
    assert t.observe(entry(epoch=5, port=100), now=0.0) == "new"
    for now in (0.1, 0.6, 1.1):                         # the impostor beats; so does the holder
        assert t.observe(entry(epoch=9, port=200), now=now) == "clash"
        assert t.observe(entry(epoch=5, port=100), now=now) is None
        assert t.entries["shard-0"].rpc_endpoint == "tcp://10.0.0.1:100"
    assert t.clashing(1.2) == {"shard-0": ("tcp://10.0.0.1:100", "tcp://10.0.0.1:200")}
    # A restart at the holder's own address is a restart, as before.
    assert t.observe(entry(epoch=6, port=100), now=1.2) == "restarted"
    # Once the holder's heartbeats stop, a process at another address may take the name.
    t.expire(3.0)
    assert t.observe(entry(epoch=9, port=200), now=3.0) == "restarted"
    assert t.entries["shard-0"].rpc_endpoint == "tcp://10.0.0.1:200"


async def test_a_live_services_name_is_not_taken_by_a_newer_process_elsewhere():
    """Two real services named alike: the directory keeps the first while it heartbeats."""
    cluster = unique_cluster()
    bus = BusConfig(cluster=cluster, mdns=False)
    first = EchoService(ServiceConfig(name="twin", kind="echo", bus=bus))
    second = EchoService(ServiceConfig(name="twin", kind="echo", bus=bus))
    async with running(first), running(second):
        assert second.epoch > first.epoch
        d = Directory(zmq.asyncio.Context.instance(), bus, me="watching")
        await d.start()
        try:
            assert await d.confirm(f"tcp://127.0.0.1:{first.rpc_port}", "static")
            await d.confirm(f"tcp://127.0.0.1:{second.rpc_port}", "static")
            await until(lambda: d.clashes(), 5, what="the clash noticed")
            for _ in range(3):                            # heartbeats of both keep coming
                await asyncio.sleep(first.config.bus.heartbeat_interval)
                assert d.get("twin").rpc_port == first.rpc_port
        finally:
            await d.stop()


async def test_the_mdns_browser_resolves_a_flood_a_bounded_batch_at_a_time_newest_first(monkeypatch):
    """2,000 records announced at once: zeroconf is asked about at most 16 at a time, 256 wait,
    and the record announced last is asked about first. (zeroconf's browser and resolver are
    stood in for: what is under test is what the Browser does with their callbacks.)"""
    from zeroconf import ServiceStateChange

    from bus import mdns

    asked: list[str] = []
    at_once = {"now": 0, "most": 0}
    release = asyncio.Event()

    class Info:
        def __init__(self, service_type, name):
            self.name = name

        async def async_request(self, zc, timeout_ms):
            asked.append(self.name)
            at_once["now"] += 1
            at_once["most"] = max(at_once["most"], at_once["now"])
            await release.wait()
            at_once["now"] -= 1
            return False                  # nothing answers a forged name

    class ZeroconfBrowser:
        def __init__(self, zc, service_type, handlers):
            self.handlers = handlers

        async def async_cancel(self):
            pass

    monkeypatch.setattr(mdns, "AsyncServiceInfo", Info)
    monkeypatch.setattr(mdns, "AsyncServiceBrowser", ZeroconfBrowser)

    class Zc:
        zeroconf = None

    browser = mdns.Browser(Zc(), lambda c: None)
    browser.start()
    (on_change,) = browser._browser.handlers
    for i in range(FORGED):
        on_change(None, mdns.SERVICE_TYPE, f"forged-{i}.{mdns.SERVICE_TYPE}", ServiceStateChange.Added)
    on_change(None, mdns.SERVICE_TYPE, f"real.{mdns.SERVICE_TYPE}", ServiceStateChange.Added)
    await until(lambda: len(asked) >= 16, 5, what="the first batch asked")
    assert asked[0] == f"real.{mdns.SERVICE_TYPE}"
    assert len(browser._tasks) <= 16 and len(browser._waiting) <= 256
    release.set()
    await until(lambda: not browser._waiting and not browser._tasks, 10, what="the flood drained")
    assert at_once["most"] <= 16 and len(asked) <= 16 + 256, (at_once, len(asked))
    await browser.stop()
