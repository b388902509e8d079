"""A peer that does not answer its first hello (busy starting on a loaded machine) is asked again:
mDNS tells of a record once, and a directory that gave up after one unanswered hello never saw that
peer (CI run 45: a 3-shard pipeline whose shards all ran, idle, while the test's directory had
handshaken with one of them)."""

from __future__ import annotations

import zmq
import zmq.asyncio

from bus.config import BusConfig, ServiceConfig
from bus.directory import Directory
from bus.mdns import Candidate
from bus.sockets import BindError
from services.echo.service import EchoService

from .procs import free_port, unique_cluster
from ..waiting import until


async def test_a_candidate_whose_first_hello_went_unanswered_is_confirmed_once_it_answers():
    cluster, rpc, pub = unique_cluster(), free_port(), free_port()
    ctx = zmq.asyncio.Context.instance()
    d = Directory(ctx, BusConfig(cluster=cluster, mdns=False), me="asking")
    await d.start()
    busy = ctx.socket(zmq.ROUTER)           # the peer's port, bound, reading nothing yet
    busy.bind(f"tcp://127.0.0.1:{rpc}")
    try:
        d._on_candidate(Candidate(cluster=cluster, name="late-echo", kind="echo", instance="0",
                                  epoch=1, host="127.0.0.1", rpc_port=rpc, pub_port=pub))
        await until(lambda: d.counters["handshake_failures"] >= 1, 10, what="the first hello unanswered")
        assert d.get("late-echo") is None
        busy.close(linger=0)
        late = await _started(lambda: EchoService(ServiceConfig(
            name="late-echo", kind="echo", rpc_port=rpc, pub_port=pub, bus=BusConfig(cluster=cluster, mdns=False))))
        try:
            entry = await d.wait_for("late-echo", 15)      # asked again, with no new record
            assert entry.epoch == late.epoch and d.counters["mdns_candidates"] == 1
        finally:
            late.stop()
            await late.shutdown()
    finally:
        busy.close(linger=0)
        await d.stop()


async def _started(make):
    """A service started on its fixed ports once the closed socket has let go of them (zmq closes
    it in its own thread)."""
    async def started():
        service = make()
        try:
            await service.start()
        except BindError:
            return None
        return service
    return await until(started, 10, every=0.05, what="the port let go")


async def test_a_candidate_that_never_answers_is_asked_with_growing_pauses_then_forgotten(monkeypatch):
    from bus import directory
    monkeypatch.setattr(directory, "RETRY_FIRST", 0.05)
    monkeypatch.setattr(directory, "RETRY_FOR", 1.0)
    cluster = unique_cluster()
    d = Directory(zmq.asyncio.Context.instance(), BusConfig(cluster=cluster, mdns=False), me="asking")
    await d.start()
    try:
        d._on_candidate(Candidate(cluster=cluster, name="gone", kind="echo", instance="0", epoch=1,
                                  host="127.0.0.1", rpc_port=free_port(), pub_port=free_port()))
        # Hellos of 1 s each: the first at 0, again after 0.05 s; the next pause (0.1 s) would
        # end past RETRY_FOR (1 s after the first failure), so two in all, then nothing retried.
        await until(lambda: d.counters["handshake_failures"] >= 2 and not d._retrying
                    and not d.handshakes_in_flight, 10, what="the candidate forgotten")
        assert d.counters["handshake_failures"] == 2
    finally:
        await d.stop()
