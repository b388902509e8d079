"""A service restarted on the same RPC and PUB ports (as `llmbus up` respawns its children) is
heard by a directory through the SUB connection it already holds: its new epoch arrives in a
heartbeat, with no new handshake and without waiting for the old entry to expire."""

from __future__ import annotations

import subprocess

import zmq.asyncio

from bus.config import BusConfig
from bus.directory import Directory
from services.health.processes import free_port

from ..waiting import until
from .procs import ROOT, cli, env, unique_cluster


async def test_a_restart_on_the_same_ports_is_heard_without_a_handshake():
    ctx = zmq.asyncio.Context()
    rpc, pub, cluster = free_port(), free_port(), unique_cluster()
    args = cli("run", "echo", "--name", "svc", "--rpc-port", str(rpc), "--pub-port", str(pub),
               "--cluster", cluster, "--no-mdns", "--no-discover")
    # The old entry must not expire during the test: then only a heartbeat can bring the new epoch.
    d = Directory(ctx, BusConfig(cluster=cluster, mdns=False, peers=(f"127.0.0.1:{rpc}",),
                                 heartbeat_misses=200), me="watcher")
    procs = []
    try:
        await d.start()
        procs.append(subprocess.Popen(args, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL))
        first = await until(lambda: d.get("svc"), 60, what="the first process heard")
        assert d.counters["handshakes"] == 1
        procs[0].kill()
        procs[0].wait()
        procs.append(subprocess.Popen(args, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL))
        second = await until(lambda: d.get("svc").epoch != first.epoch and d.get("svc"), 60,
                             what="the new epoch heard")
        assert second.pid == procs[1].pid and second.pub_port == pub
        assert d.counters["handshakes"] == 1 and d.counters["restarts_seen"] == 1
    finally:
        for p in procs:
            p.kill()
            p.wait()
        await d.stop()
        ctx.destroy(linger=0)
