"""Configuration of one service on the bus: a dataclass, validated when built."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .curve import ClusterKey

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class BusConfig:
    """Where a process sits on the bus and how it finds others (services and busctl alike)."""

    cluster: str = "default"
    host: str = "127.0.0.1"             # address to bind
    advertise_host: str = ""            # address peers should dial; defaults to host
    mdns: bool = True
    mdns_interfaces: tuple[str, ...] = ()   # IPs to run mDNS on; () = the advertise host, or all
    peers: tuple[str, ...] = ()         # static peers: "host:rpc_port"
    heartbeat_interval: float = 0.5
    heartbeat_misses: int = 3           # a peer is dead after this many missed heartbeats
    key: ClusterKey | None = None       # the cluster's CURVE key; None: plain TCP, as before

    def __post_init__(self):
        if not _NAME.match(self.cluster):
            raise ValueError(f"cluster name {self.cluster!r}: letters, digits, '-', '_', '.' only")
        if not 0.05 <= self.heartbeat_interval <= 60:
            raise ValueError("heartbeat_interval must be within 0.05..60 s")
        if self.heartbeat_misses < 1:
            raise ValueError("heartbeat_misses must be at least 1")
        for p in self.peers:
            parse_peer(p)

    @property
    def advertised(self) -> str:
        if self.advertise_host:
            return self.advertise_host
        return "127.0.0.1" if self.host in ("0.0.0.0", "*", "") else self.host

    @property
    def dead_after(self) -> float:
        return self.heartbeat_interval * self.heartbeat_misses


@dataclass(frozen=True)
class ServiceConfig:
    name: str
    kind: str
    instance: str = "0"
    bus: BusConfig = field(default_factory=BusConfig)
    rpc_port: int = 0                   # 0: pick a free port
    pub_port: int = 0
    drain_timeout: float = 10.0
    discover: bool = False              # run a directory of peers (services that call others)
    unit: str = ""                      # the systemd unit running this process, if one does
    # Requests handled at once (streams count; bus.* do not); past it new ones get `busy`.
    # Above what a scheduler admits (its own queue answers `queue_full` first), below what
    # would let one flood of callers hold unbounded memory.
    max_requests: int = 1024

    def __post_init__(self):
        for what in ("name", "kind", "instance"):
            if not _NAME.match(getattr(self, what)):
                raise ValueError(f"{what} {getattr(self, what)!r}: letters, digits, '-', '_', '.' only")
        if self.max_requests < 1:
            raise ValueError("max_requests must be at least 1")
        for port in (self.rpc_port, self.pub_port):
            if not 0 <= port <= 65535:
                raise ValueError(f"port {port} out of range")


def parse_peer(spec: str) -> tuple[str, int]:
    """'host:port' -> (host, port); raises ValueError with the expected form."""
    host, sep, port = spec.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"peer {spec!r}: expected HOST:RPC_PORT")
    return host.strip("[]"), int(port)
