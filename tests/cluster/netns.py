"""A small network of namespaces for multi-host tests: a bridge in a namespace of its own, and
each host a namespace with a veth into it (lo up, multicast routed to the veth for mDNS).

Everything is named with a prefix of its own and removed by `close()`, even after a failure;
nothing is added to the namespace the test runs in.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


def why_not() -> str:
    """'' when this machine lets a test build namespaces; otherwise why it cannot."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
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


class Network:
    """Hosts on one bridge: `add(host)` gives its address; `cmd(host, argv)` runs argv there."""

    def __init__(self, subnet: str = "10.77.0"):
        self.prefix = f"lb{uuid.uuid4().hex[:6]}"
        self.subnet = subnet
        self.bridge = f"{self.prefix}-br"
        self.hosts: dict[str, str] = {}       # host -> address
        self.namespaces: list[str] = []
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
        _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", outer,
            "netns", self.bridge)
        addr = f"{self.subnet}.{n}"
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
        _ip("-n", self.bridge, "link", "set", outer, "master", "br0", "up")
        self.hosts[host] = addr
        return addr

    def cmd(self, host: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def close(self) -> None:
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        self.namespaces.clear()
