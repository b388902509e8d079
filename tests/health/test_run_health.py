"""`llmbus run health --mode children` on its own: it runs a service, `busctl kill` has it SIGKILL
that service, it starts it again, and `busctl list` and `busctl monitor` tell what happened."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
import zmq.asyncio

from bus.config import BusConfig
from bus.directory import Directory

from ..bus.procs import Procs, busctl_cmd, cli, env, free_port, unique_cluster
from ..waiting import until


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.stop_all()


async def test_a_killed_child_is_started_again_and_listed_with_its_restart(procs):
    cluster = unique_cluster()
    watcher_port, echo_port = free_port(), free_port()
    bus = ["--cluster", cluster, "--no-mdns", "--peer", f"127.0.0.1:{watcher_port}",
           "--peer", f"127.0.0.1:{echo_port}"]
    child = " ".join(["run", "echo", "--name", "a", "--rpc-port", str(echo_port), *bus])
    watcher = procs.start(cli("run", "health", "--name", "health-0", "--mode", "children",
                              "--child", f"a={child}", "--rpc-port", str(watcher_port), *bus))

    def busctl(*args):
        return subprocess.run(busctl_cmd(*args, *bus), capture_output=True, text=True,
                              timeout=30, env=env())

    def a_row():
        r = busctl("list", "--json", "--wait", "1")
        rows = {row["name"]: row for row in json.loads(r.stdout or "[]")}
        return rows.get("a")

    async def up_row(**want):
        row = await asyncio.to_thread(a_row)
        return row if row and row["state"] == "up" and all(
            row["health"][k] == v for k, v in want.items()) else None

    first = await until(lambda: up_row(), timeout=60, every=0.2, what="the child up")
    # The test hears the watcher's events itself; its heartbeat heard means it is subscribed.
    directory = Directory(zmq.asyncio.Context.instance(),
                          BusConfig(cluster=cluster, mdns=False,
                                    peers=(f"127.0.0.1:{watcher_port}",)), me="test")
    directory.subscribe(b"health.")
    events = []
    directory.on_event.append(lambda topic, msg: topic.startswith(b"health.service")
                              and events.append((topic.decode(), msg.body.service)))
    await directory.start()
    try:
        await directory.wait_for("health-0", 30)
        killed = await asyncio.to_thread(busctl, "kill", "a", "--signal", "SIGKILL")
        assert killed.returncode == 0 and f"(pid {first['pid']})" in killed.stdout, killed.stderr
        again = await until(lambda: up_row(restarts=1), timeout=60, every=0.2,
                            what="the child started again")
        await until(lambda: len(events) >= 2, timeout=10, what="the watcher's events")
    finally:
        await directory.stop()
    assert again["pid"] != first["pid"] and again["epoch"] > first["epoch"]
    assert "exited with status -9" in again["health"]["last_error"]
    assert events == [("health.service_down", "a"), ("health.service_up", "a")]
    assert watcher.poll() is None
    bad = busctl("kill", "a", "--signal", "SIGBOGUS")
    assert bad.returncode == 2 and "SIGBOGUS" in bad.stderr
