"""Real service processes on loopback: discovery, calls, restarts, busctl, systemd notify."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import zmq.asyncio

from bus.config import BusConfig
from bus.directory import Directory
from bus.errors import CallTimeout, PeerDead, PeerRestarted
from bus.peers import Peers
from wire.messages.bus import Echo

from .procs import busctl_cmd, cli, env, free_port, unique_cluster

pytestmark = pytest.mark.slow


def echo(procs, name, cluster, *extra):
    return procs.start(cli("run", "echo", "--name", name, "--cluster", cluster,
                           "--interface", "127.0.0.1", *extra))


def busctl(*args, timeout=30) -> subprocess.CompletedProcess:
    return subprocess.run(busctl_cmd(*args), capture_output=True, text=True, timeout=timeout, env=env())


def busctl_until(pred, *args, tries=10):
    """Run busctl until `pred(result)` holds: services need a moment to start and advertise."""
    for _ in range(tries):
        r = busctl(*args)
        if pred(r):
            return r
        time.sleep(0.5)
    raise AssertionError(f"busctl {' '.join(args)} never satisfied the test:\n{r.stdout}\n{r.stderr}")


def names(r):
    return {row["name"] for row in json.loads(r.stdout or "[]")}


def test_two_processes_find_each_other_by_mdns_and_call_each_other(procs):
    cluster = unique_cluster()
    echo(procs, "alpha", cluster)
    echo(procs, "beta", cluster)
    r = busctl_until(lambda r: names(r) == {"alpha", "beta"},
                     "list", "--json", "--cluster", cluster, "--interface", "127.0.0.1")
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["alpha"]["state"] == "ready" and rows["alpha"]["heartbeat_age_s"] < 1.5
    for src, dst in (("alpha", "beta"), ("beta", "alpha")):
        r = busctl_until(lambda r: r.returncode == 0, "call", src, "bus.probe",
                         json.dumps({"target": dst}), "--json", "--cluster", cluster,
                         "--interface", "127.0.0.1")
        reply = json.loads(r.stdout)
        assert reply["type"] == "bus.probe_reply"
        assert reply["body"]["target"] == dst and reply["body"]["epoch"] == rows[dst]["epoch"]
    # The human-readable table names both too. Each busctl is a fresh mDNS browse of --wait
    # seconds, which now and then misses a record (seen once in CI, with beta up for seconds):
    # retried as above.
    r = busctl_until(lambda r: r.returncode == 0 and "alpha" in r.stdout and "beta" in r.stdout,
                     "list", "--cluster", cluster, "--interface", "127.0.0.1")
    assert r.stdout.startswith("NAME")


def test_static_peers_and_no_mdns(procs):
    cluster = unique_cluster()
    pa, pb = free_port(), free_port()
    echo(procs, "left", cluster, "--no-mdns", "--rpc-port", str(pa), "--peer", f"127.0.0.1:{pb}")
    echo(procs, "right", cluster, "--no-mdns", "--rpc-port", str(pb), "--peer", f"127.0.0.1:{pa}")
    peers = ["--no-mdns", "--peer", f"127.0.0.1:{pa}", "--peer", f"127.0.0.1:{pb}"]
    busctl_until(lambda r: names(r) == {"left", "right"}, "list", "--json", "--cluster", cluster, *peers)
    r = busctl_until(lambda r: r.returncode == 0, "call", "left", "bus.probe",
                     '{"target": "right"}', "--json", "--cluster", cluster, *peers)
    assert json.loads(r.stdout)["body"]["endpoint"] == f"tcp://127.0.0.1:{pb}"
    r = busctl("status", "right", "--json", "--cluster", cluster, *peers)
    status = json.loads(r.stdout)
    assert status["name"] == "right" and "left" in status["info"]["peers"]


def test_nothing_found_says_why():
    r = busctl("list", "--cluster", unique_cluster(), "--no-mdns", "--wait", "0.5")
    assert r.returncode == 3
    assert "no services found" in r.stderr and "no static peers configured" in r.stderr
    r = busctl("call", "ghost", "bus.status", "--cluster", unique_cluster(),
               "--interface", "127.0.0.1", "--wait", "1")
    assert r.returncode == 3 and "'ghost' not found" in r.stderr and "cluster" in r.stderr


def test_busctl_call_rejects_a_bad_body_before_sending(procs):
    r = busctl("call", "x", "bus.probe", '{"target": 5}', "--no-mdns", "--wait", "0.1")
    assert r.returncode == 2 and "body.target: expected str" in r.stderr
    r = busctl("call", "x", "no.such.method", "{}", "--no-mdns", "--wait", "0.1")
    assert r.returncode == 2 and "unknown method" in r.stderr


async def _until(fn, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await fn()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_sigkill_and_restart_calls_go_on_against_the_new_epoch(procs):
    cluster = unique_cluster()
    port = free_port()
    args = ("--no-mdns", "--rpc-port", str(port))
    first = echo(procs, "victim", cluster, *args)
    ctx = zmq.asyncio.Context.instance()
    d = Directory(ctx, BusConfig(cluster=cluster, mdns=False, peers=(f"127.0.0.1:{port}",)), me="t")
    await d.start()
    peers = Peers(ctx, d, me="t")
    try:
        before = await _until(lambda: d.wait_for("victim", 1))
        assert (await peers.call("victim", Echo(text="one"))).text == "one"
        first.kill()
        first.wait(5)
        # A call in flight across the kill ends typed, never hangs or succeeds falsely.
        pending = asyncio.create_task(peers.call("victim", Echo(text="lost?"), timeout=20))
        second = echo(procs, "victim", cluster, *args)
        after = await _until(lambda: _new_epoch(d, before.epoch))
        assert after.epoch > before.epoch and d.counters["restarts_seen"] >= 1
        try:
            r = await pending        # delivered to the new process after reconnecting: fine
            assert r.text == "lost?"
        except (PeerRestarted, PeerDead, CallTimeout):
            pass    # PeerDead: on a loaded machine the old heartbeats expire before the new start
        for i in range(5):
            assert (await peers.call("victim", Echo(text=str(i)))).text == str(i)
        client = await peers.client("victim")
        assert client.peer_epoch == after.epoch
        assert second.poll() is None
    finally:
        await peers.close()
        await d.stop()


async def _new_epoch(d, old):
    e = await d.wait_for("victim", 1)
    assert e.epoch != old
    return e


def test_restart_with_a_new_port_is_found_again_by_mdns(procs):
    cluster = unique_cluster()
    echo(procs, "caller", cluster)
    target = echo(procs, "target", cluster)
    q = ("--json", "--cluster", cluster, "--interface", "127.0.0.1")
    r = busctl_until(lambda r: r.returncode == 0, "call", "caller", "bus.probe", '{"target": "target"}', *q)
    old = json.loads(r.stdout)["body"]
    target.kill()
    target.wait(5)
    echo(procs, "target", cluster)
    r = busctl_until(lambda r: r.returncode == 0 and json.loads(r.stdout)["body"]["epoch"] != old["epoch"],
                     "call", "caller", "bus.probe", '{"target": "target", "timeout": 3}', *q, tries=20)
    new = json.loads(r.stdout)["body"]
    assert new["epoch"] > old["epoch"] and new["endpoint"] != old["endpoint"]


def test_monitor_prints_live_heartbeats(procs):
    cluster = unique_cluster()
    echo(procs, "beating", cluster)
    r = busctl_until(lambda r: r.returncode == 0, "monitor", "bus.heartbeat", "--count", "3",
                     "--duration", "10", "--json", "--cluster", cluster, "--interface", "127.0.0.1")
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(events) == 3 and {e["sender"] for e in events} == {"beating"}
    seqs = [e["body"]["seq"] for e in events]
    assert all(a < b for a, b in zip(seqs, seqs[1:])), seqs     # three beats, each one new


def test_systemd_notify_ready_watchdog_stopping_and_clean_exit_on_sigterm(procs):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(10)
        e = env()
        e.update(NOTIFY_SOCKET=path, WATCHDOG_USEC="2000000")
        p = subprocess.Popen(cli("run", "echo", "--name", "unit", "--cluster", unique_cluster(),
                                 "--no-mdns"), env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.procs.append(p)
        got = []
        while "WATCHDOG=1" not in got:
            got.extend(sock.recv(4096).decode().splitlines())
        assert got[0] == "READY=1" and got[1].startswith("STATUS=")
        p.send_signal(signal.SIGTERM)
        while "STOPPING=1" not in got:
            got.extend(sock.recv(4096).decode().splitlines())
        assert p.wait(10) == 0
        sock.close()
