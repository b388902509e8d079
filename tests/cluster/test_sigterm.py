"""Every service stops on SIGTERM within its drain time, whatever it is waiting for: a scheduler
with no tokenizer nor shards (still in start), a shard waiting to be placed, a pinned shard, a
tokenizer and a gateway with no scheduler."""

from __future__ import annotations

import signal
import time

import pytest
import zmq.asyncio

from bus.config import BusConfig
from bus.directory import Directory
from tests.waiting import until

from ..bus.procs import Procs, cli, free_port, unique_cluster

pytestmark = pytest.mark.slow

DRAIN_S = 10.0    # ServiceConfig.drain_timeout's default


async def test_every_service_stops_on_sigterm_within_its_drain_time(model_path):
    cluster = unique_cluster()
    ports = {n: free_port() for n in ("sched", "placed", "pinned", "tok", "gw")}
    args = {
        "sched": ["scheduler"],
        "placed": ["shard", "--model", str(model_path), "--memory", "200M", "--pages", "16"],
        "pinned": ["shard", "--model", str(model_path), "--layers", "0:30", "--pages", "16"],
        "tok": ["tokenizer", "--model", str(model_path)],
        "gw": ["gateway", "--http", f"127.0.0.1:{free_port()}"],
    }
    procs = Procs()
    # No mDNS, no static peers: nobody finds anybody, so the scheduler waits in start forever.
    d = Directory(zmq.asyncio.Context.instance(),
                  BusConfig(cluster=cluster, mdns=False,
                            peers=tuple(f"127.0.0.1:{p}" for p in ports.values())), me="test")
    await d.start()
    try:
        running = {n: procs.start(cli("run", *a, "--name", n, "--cluster", cluster, "--no-mdns",
                                      "--rpc-port", str(ports[n])))
                   for n, a in args.items()}
        await until(lambda: all(d.get(n) is not None for n in args), timeout=120,
                    what="every service on the bus")
        # (Each as it is live now: on a loaded machine a heartbeat may come late, and the entry
        # goes until the next one.)
        await until(lambda: all(getattr(d.get(n), "state", None) == "ready" for n in args if n != "sched"),
                    timeout=120, what="every service but the scheduler ready")
        assert (await d.wait_for("sched", 30)).state == "starting"   # still waiting for a tokenizer, in start()
        sent = time.monotonic()
        for p in running.values():
            p.send_signal(signal.SIGTERM)
        took = {}

        def all_exited() -> bool:
            for n, p in running.items():
                if n not in took and p.poll() is not None:
                    took[n] = (p.returncode, round(time.monotonic() - sent, 2))
            return len(took) == len(running)

        await until(all_exited, timeout=DRAIN_S + 5, every=0.05, what=f"every service exited ({took})")
    finally:
        procs.stop_all()
        await d.stop()
    late = {n: t for n, t in took.items() if t[0] != 0 or t[1] > DRAIN_S}
    assert not late, f"(exit status, seconds after SIGTERM) of services that did not stop: {took}"
