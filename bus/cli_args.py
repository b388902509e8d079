"""Command-line options every bus process shares (services, busctl), turned into a BusConfig."""

from __future__ import annotations

import argparse

from .config import BusConfig


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


def bus_config(args: argparse.Namespace):
    return BusConfig(cluster=args.cluster, host=args.host, advertise_host=args.advertise,
                     mdns=args.mdns, mdns_interfaces=tuple(args.interfaces),
                     peers=tuple(args.peers), heartbeat_interval=args.heartbeat)
