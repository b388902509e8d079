"""A caller's socket to a service that is down retries every reconnect interval, never backing
off: a service respawned on its port (`llmbus up` fixes every child's ports; so do systemd units)
is reached within one interval of binding it. Backing off (100, 200, 400, 800, 1600 ms) left a
gateway's continuations and the shards' answers queued for up to a second and a half after a
respawned scheduler was ready."""

from __future__ import annotations

import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from bus.client import RpcClient
from bus.sockets import ACTIVATIONS, CONTROL
from services.health.processes import free_port


async def retry_intervals(limits, n: int = 4) -> list[int]:
    """The intervals (ms) of the first `n` connection retries of a client to a closed port."""
    client = RpcClient(zmq.asyncio.Context.instance(), f"tcp://127.0.0.1:{free_port()}",
                       limits=limits)
    monitor = client._sock.get_monitor_socket(zmq.EVENT_CONNECT_RETRIED)
    try:
        return [int((await recv_monitor_message(monitor))["value"]) for _ in range(n)]
    finally:
        client._sock.disable_monitor()
        monitor.close(linger=0)
        await client.close()


async def test_a_caller_retries_a_closed_port_every_interval_without_backing_off():
    for limits in (CONTROL, ACTIVATIONS):
        # Each the interval, plus up to as much again (libzmq's random part); backing off, the
        # second would be twice the interval at least.
        intervals = await retry_intervals(limits)
        assert all(limits.reconnect_ivl_ms <= i < 2 * limits.reconnect_ivl_ms for i in intervals)
