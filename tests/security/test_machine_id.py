"""Finding: `/v1/cluster` showed the raw machine id (the one a forged heartbeat needed, and which
machine-id(5) says to keep confidential). Every process shows a keyed hash of it instead."""

from __future__ import annotations

import time

import socket
from pathlib import Path

from bus.machine import machine_id


def raw_machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        if Path(path).is_file() and (found := Path(path).read_text().strip()):
            return found
    return socket.gethostname()


def test_the_machine_id_shown_is_a_hash_of_the_raw_one():
    raw = raw_machine_id()
    assert machine_id() != raw and raw not in machine_id()
    assert len(machine_id()) == 32 and int(machine_id(), 16) >= 0


def test_cluster_view_never_holds_the_raw_id():
    from bus.liveness import PeerEntry
    from gateway.health import cluster_view
    from wire.messages.info import HealthInfo
    me = machine_id()
    watcher = PeerEntry(name="health-a", kind="health", instance="a", epoch=1, host="127.0.0.1",
                        rpc_port=1, pub_port=2, machine=me, state="ready",
                        info=HealthInfo(machine=me, mode="children"))
    view = repr(cluster_view([watcher], time.monotonic()))
    assert me in view and raw_machine_id() not in view
