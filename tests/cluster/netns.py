"""A small network of namespaces for multi-host tests: a bridge in a namespace of its own, and
each host a namespace with a veth into it (lo up, multicast routed to the veth for mDNS).

With `delay_ms`, the hosts' links are taps of a userspace bridge instead (delay_bridge.py), which
delays every frame between two hosts by that much: netem's delay, on kernels without netem.

Everything is named with a prefix of its own and removed by `close()`, even after a failure;
nothing is added to the namespace the test runs in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NETNS_DIR = "/run/netns"     # where `ip netns add` names its namespaces
TAP_MTU = 65000     # few, large frames: the bridge's cost is per frame


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


def why_not() -> str:
    """'' when this machine lets a test build namespaces; otherwise why it cannot."""
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "no `ip` (iproute2) or `nsenter` (util-linux) command"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"lbprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as e:
        return f"`ip netns add` fails here: {getattr(e, 'stderr', '') or e}"
    try:
        _ip("-n", probe, "link", "add", "b0", "type", "bridge")
    except subprocess.CalledProcessError as e:
        return f"no bridge in a namespace: {e.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=20)
    return ""


def worker_subnet() -> str:
    """A /24 of this pytest process's own (xdist's workers gw0, gw1, ... run side by side, and
    two bridges on one subnet would take each other's routes)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return f"10.{77 + (int(worker) if worker.isdigit() else 0) % 100}.0"


class Network:
    """Hosts on one bridge: `add(host)` gives its address; `cmd(host, argv)` runs argv there."""

    def __init__(self, subnet: str | None = None, delay_ms: float = 0.0):
        self.prefix = f"lb{uuid.uuid4().hex[:6]}"
        self.subnet = subnet or worker_subnet()
        self.delay_ms = delay_ms
        self.bridge = f"{self.prefix}-br"
        self.hosts: dict[str, str] = {}       # host -> address
        self.namespaces: list[str] = []
        self.relay: subprocess.Popen | None = None
        if delay_ms > 0:
            self.relay = subprocess.Popen([sys.executable, "-m", "tests.cluster.delay_bridge",
                                           "--delay-ms", str(delay_ms)], cwd=ROOT,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            return
        self._add_ns(self.bridge)
        _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        # Snooping would hold back multicast until an IGMP querier speaks: mDNS must pass at once.
        _ip("-n", self.bridge, "link", "set", "br0", "type", "bridge", "mcast_snooping", "0")
        _ip("-n", self.bridge, "link", "set", "br0", "up")

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def add(self, host: str) -> str:
        ns, n = self.ns(host), len(self.hosts) + 1
        self._add_ns(ns)
        outer = f"{self.prefix}v{n}"
        if self.relay is None:
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", outer,
                "netns", self.bridge)
            _ip("-n", self.bridge, "link", "set", outer, "master", "br0", "up")
        else:
            self.relay.stdin.write(f"add {outer}\n")
            self.relay.stdin.flush()
            said = self.relay.stdout.readline().strip()
            if said != f"ok {outer}":
                raise OSError(f"the delaying bridge could not make a tap: {said or 'it exited'}")
            _ip("link", "set", outer, "netns", ns, "name", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "mtu", str(TAP_MTU))
        addr = f"{self.subnet}.{n}"
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
        self.hosts[host] = addr
        return addr

    def cmd(self, host: str, argv: list[str]) -> list[str]:
        # nsenter, not `ip netns exec`: that one mounts /sys afresh for the command, and the
        # control-group mounts under /sys/fs/cgroup (a host's memory limit) would vanish.
        return ["nsenter", f"--net={NETNS_DIR}/{self.ns(host)}", *argv]

    def link_bytes(self, host: str) -> tuple[int, int]:
        """Bytes `host` has sent and received on its link so far."""
        out = subprocess.run(["ip", "-n", self.ns(host), "-s", "-j", "link", "show", "eth0"],
                             check=True, capture_output=True, text=True, timeout=20).stdout
        stats = json.loads(out)[0]["stats64"]
        return int(stats["tx"]["bytes"]), int(stats["rx"]["bytes"])

    def close(self) -> None:
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        self.namespaces.clear()
        if self.relay is not None:
            self.relay.stdin.close()
            try:
                self.relay.wait(10)
            except subprocess.TimeoutExpired:
                self.relay.kill()
                self.relay.wait()
