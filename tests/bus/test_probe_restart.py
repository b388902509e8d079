"""bus.probe of a target respawned on its RPC port that the prober has not heard of yet (as a
last shard probing a scheduler the watcher just respawned): the new process answers, and that is
the answer the probe wants, not a failure (it was `peer_restarted`, and the scheduler refused its
pipeline until it checked again)."""

from __future__ import annotations

import zmq.asyncio

from bus.config import BusConfig, ServiceConfig
from bus.service import Service
from bus.sockets import BindError
from services.health.processes import free_port
from wire.messages.bus import Probe

from ..waiting import until
from .serving import client_of, running

# The target heartbeats rarely, and the prober takes a peer for dead only after many missed
# heartbeats: the target's first process stays alive in the prober's directory for the whole
# test, and its new process (on a PUB port of its own) goes unheard: only the probe's own call
# can meet the new epoch.
TARGET_BUS = BusConfig(cluster="probe-test", mdns=False, heartbeat_interval=5.0)


class Plain(Service):
    kind = "test"


async def started(service: Service) -> Service:
    """`service` started; on a port another process of this test closed just now, once the
    socket's close has let the port go (ZeroMQ closes in the background)."""
    async def bound():
        try:
            await service.start()
            return True
        except BindError:
            return False
    await until(bound, 10, every=0.05, what="the target's port free again")
    return service


async def test_a_probe_answered_by_the_targets_new_process_succeeds():
    ctx = zmq.asyncio.Context.instance()
    port = free_port()

    def target() -> Plain:
        return Plain(ServiceConfig(name="target", kind="test", bus=TARGET_BUS, rpc_port=port),
                     ctx=ctx)

    prober_bus = BusConfig(cluster="probe-test", mdns=False, heartbeat_misses=100,
                           peers=(f"127.0.0.1:{port}",))
    prober = Plain(ServiceConfig(name="prober", kind="test", discover=True, bus=prober_bus),
                   ctx=ctx)
    async with running(prober):
        first = await started(target())
        try:
            heard = await prober.directory.wait_for("target", 10)
            assert heard.epoch == first.epoch
        finally:
            first.stop()
            await first.shutdown()
        second = await started(target())
        try:
            async with client_of(prober) as c:
                assert prober.directory.get("target").epoch == first.epoch   # the new one unheard
                reply = await c.call(Probe(target="target", timeout=5.0), timeout=10)
            assert reply.epoch == second.epoch
        finally:
            second.stop()
            await second.shutdown()
