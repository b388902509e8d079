"""Command-line options every bus process shares (services, busctl), turned into a BusConfig."""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

from .config import BusConfig
from .curve import ClusterKey, read_key_file


def add_bus_arguments(p: argparse.ArgumentParser, env: dict) -> None:
    """Options every bus process shares; environment variables give the defaults."""
    g = p.add_argument_group("bus")
    g.add_argument("--cluster", default=env.get("LLMBUS_CLUSTER", "default"))
    g.add_argument("--host", default=env.get("LLMBUS_HOST", "127.0.0.1"), help="address to bind")
    g.add_argument("--advertise", default=env.get("LLMBUS_ADVERTISE", ""),
                   help="address peers dial (default: --host)")
    g.add_argument("--no-mdns", dest="mdns", action="store_false",
                   default=env.get("LLMBUS_MDNS", "1") != "0", help="static peers only")
    g.add_argument("--interface", action="append", dest="interfaces",
                   default=[i for i in env.get("LLMBUS_MDNS_INTERFACES", "").split(",") if i],
                   help="IP address to run mDNS on (repeatable)")
    g.add_argument("--peer", action="append", dest="peers",
                   default=[i for i in env.get("LLMBUS_PEERS", "").split(",") if i],
                   help="static peer HOST:RPC_PORT (repeatable)")
    g.add_argument("--heartbeat", type=float, default=0.5, help="heartbeat interval (s)")
    add_key_argument(g, env)
    g.add_argument("--insecure", action="store_true", default=env.get("LLMBUS_INSECURE") == "1",
                   help="bind beyond loopback without a key: anyone who reaches the port may "
                        "call every service (default: refused)")


def add_key_argument(p, env: dict) -> None:
    """--key-file (or $LLMBUS_KEY_FILE): the cluster's CURVE key, a file and never the key itself,
    so it shows in no process list."""
    p.add_argument("--key-file", type=Path, default=Path(env["LLMBUS_KEY_FILE"])
                   if env.get("LLMBUS_KEY_FILE") else None,
                   help="the cluster's CURVE key (`llmbus keygen`): with it every link is "
                        "encrypted and only holders of the same file are answered")


def cluster_key(args: argparse.Namespace) -> ClusterKey | None:
    """The key named by --key-file, or None; KeyFileError (a ValueError) says what is wrong."""
    return read_key_file(args.key_file) if args.key_file is not None else None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(config: BusConfig, insecure: bool) -> None:
    """A bus bound beyond loopback needs the cluster key, or --insecure saying it means it."""
    if config.key is None and not insecure and not is_loopback(config.host):
        raise ValueError(f"--host {config.host}: a bus bound beyond loopback needs the cluster's "
                         f"key (--key-file or LLMBUS_KEY_FILE; `llmbus keygen` makes one): "
                         f"without it anyone who reaches the port may call every service. "
                         f"--insecure (LLMBUS_INSECURE=1) runs it so anyway")


def bus_config(args: argparse.Namespace, binds: bool = True):
    """The BusConfig of the options; `binds`: the process binds its bus sockets at --host."""
    config = BusConfig(cluster=args.cluster, host=args.host, advertise_host=args.advertise,
                       mdns=args.mdns, mdns_interfaces=tuple(args.interfaces),
                       peers=tuple(args.peers), heartbeat_interval=args.heartbeat,
                       key=cluster_key(args))
    if binds:
        check_exposure(config, args.insecure)
    return config
