"""Service names: unique per host by default, and two live services with one name are reported
instead of the second being silently ignored."""

from __future__ import annotations

import subprocess

import pytest

from bus.liveness import LivenessTable, PeerEntry
from services.cli.run import default_name

from ..bus.procs import Procs, busctl_cmd, cli, env, unique_cluster
from ..waiting import until_sync


def entry(epoch: int, port: int) -> PeerEntry:
    return PeerEntry(name="shard-0", kind="shard", instance="0", epoch=epoch, host="10.0.0.1",
                     rpc_port=port, pub_port=port + 1)


def test_default_names_carry_the_host_name():
    assert default_name("shard", "0", "gpu-box-3.lab.example") == "shard-gpu-box-3-0"
    assert default_name("shard", "1", "odd host!") == "shard-odd-host-1"
    long = default_name("scheduler", "0", "h" * 80)
    assert len(long) <= 63 and long.startswith("scheduler-h") and long.endswith("-0")


def test_an_older_epoch_beating_elsewhere_is_a_clash_not_a_restart():
    t = LivenessTable(dead_after=1.5)
    t.observe(entry(epoch=5, port=100), now=0.0)
    assert t.observe(entry(epoch=4, port=200), now=0.1) == "clash"
    assert t.entries["shard-0"].epoch == 5       # the newer keeps the name
    assert t.clashing(1.0) == {"shard-0": ("tcp://10.0.0.1:100", "tcp://10.0.0.1:200")}
    assert t.clashing(2.0) == {}                  # the older stopped beating: no clash now


def test_a_stale_heartbeat_of_the_same_address_is_no_clash():
    t = LivenessTable(dead_after=1.5)
    t.observe(entry(epoch=5, port=100), now=0.0)
    assert t.observe(entry(epoch=4, port=100), now=0.1) == "stale"
    assert t.clashing(0.2) == {}


@pytest.mark.slow
def test_busctl_list_reports_two_live_services_with_one_name():
    cluster = unique_cluster()
    procs = Procs()
    try:
        for _ in range(2):
            procs.start(cli("run", "echo", "--name", "twin", "--cluster", cluster,
                            "--interface", "127.0.0.1"))

        def listed():
            r = subprocess.run(busctl_cmd("list", "--cluster", cluster, "--wait", "2"),
                               capture_output=True, text=True, timeout=60, env=env())
            return r if "NAME CLASH" in r.stderr else None

        r = until_sync(listed, timeout=90, every=0.5, what="busctl reporting the clash")
        line = next(ln for ln in r.stderr.splitlines() if "NAME CLASH" in ln)
        assert "twin" in line and line.count("tcp://") == 2, line
    finally:
        procs.stop_all()
