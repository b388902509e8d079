"""`llmbus run KIND`: run one service in this process until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import re
import socket
import sys

from bus.cli_args import add_bus_arguments, bus_config

# kind -> light module with add_arguments(parser) and build(args, ServiceConfig) -> Service;
# build imports the service itself, so numpy loads only after --blas-threads is applied.
KINDS = {
    "echo": "services.echo",
    "shard": "services.shard.cli",
    "tokenizer": "services.tokenizer.cli",
    "scheduler": "services.scheduler.cli",
    "gateway": "gateway.cli",
    "health": "services.health.cli",
}


def kind_module(kind: str):
    """The light module of `llmbus run KIND`, loaded by name: a command that starts the service
    (`llmbus up`) hands on options its config declares, declared there once."""
    return importlib.import_module(KINDS[kind])


def add_parser(sub: argparse._SubParsersAction, env: dict) -> None:
    run = sub.add_parser("run", help="run one service in this process")
    kinds = run.add_subparsers(dest="kind", required=True)
    for kind, module in KINDS.items():
        p = kinds.add_parser(kind)
        add_bus_arguments(p, env)
        p.add_argument("--name", default=None,
                       help=f"service name (default: {kind}-HOSTNAME-INSTANCE, unique per host)")
        p.add_argument("--instance", default="0")
        p.add_argument("--rpc-port", type=int, default=0)
        p.add_argument("--pub-port", type=int, default=0)
        # 1 by default: a shard's quantized layers run in the native kernels, split over their own pool
        # (`llmbus run shard --threads`); OpenBLAS's threads spin after each call and would take those
        # cores. Raise it where numpy's BLAS does the work (a shard with --weights float32, or without
        # the native library).
        p.add_argument("--blas-threads", type=int, default=1,
                       help="BLAS threads of this process (numpy's matrix products)")
        p.add_argument("--no-discover", dest="discover", action="store_false",
                       help="do not keep a directory of peers")
        p.add_argument("--unit", default=env.get("LLMBUS_UNIT", ""),
                       help="systemd unit running this process, told to the health watcher "
                            "(the units set LLMBUS_UNIT=%%n)")
        importlib.import_module(module).add_arguments(p)
        p.set_defaults(func=_run, module=module)


def default_name(kind: str, instance: str, host: str | None = None) -> str:
    """`kind-host-instance`: services started on two machines without --name do not collide."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "-", host if host is not None else socket.gethostname())
    host = host.split(".")[0].strip("-") or "host"
    return f"{kind}-{host[:63 - len(kind) - len(instance) - 2]}-{instance}"


def _run(args: argparse.Namespace) -> int:
    # BLAS reads these once, when numpy loads: set them before the service module imports it.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.blas_threads)
    from bus.config import ServiceConfig
    try:
        config = ServiceConfig(name=args.name or default_name(args.kind, args.instance), kind=args.kind,
                               instance=args.instance, bus=bus_config(args),
                               rpc_port=args.rpc_port, pub_port=args.pub_port,
                               discover=args.discover, unit=args.unit)
    except ValueError as e:
        print(f"llmbus run {args.kind}: {e}", file=sys.stderr)
        return 2
    try:
        service = importlib.import_module(args.module).build(args, config)
        asyncio.run(service.run())
    except (ValueError, OSError) as e:   # bad model file, port in use, bad option value
        print(f"llmbus run {args.kind}: {e}", file=sys.stderr)
        return 1
    return 0
