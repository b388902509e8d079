"""`llmbus run health`: options of the health watcher (one per machine)."""

from __future__ import annotations

import argparse
import shlex
import sys

from bus.options import add_options, options_of

from .policy import HealthConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=("systemd", "children"), default="systemd",
                   help="systemd: units run this machine's services (LLMBUS_UNIT in their "
                        "heartbeats); children: the watcher runs the --child services itself")
    p.add_argument("--child", action="append", default=[], metavar="NAME=ARGS",
                   help="with --mode children: run `llmbus ARGS` as service NAME (repeatable), "
                        "e.g. 'shard-0=run shard --layers 0:15 --name shard-0'")
    p.add_argument("--watch-unit", action="append", dest="watch_units", default=[], metavar="UNIT",
                   help="with --mode systemd: a llmbus-*.service unit of this machine the watcher "
                        "may kill and restart (repeatable; `llmbus install-units` writes them "
                        "to health.env); no other unit is ever acted on")
    p.add_argument("--logs", default=None, help="folder for the children's logs")
    add_policy_arguments(p)


def add_policy_arguments(p: argparse.ArgumentParser) -> None:
    """The restart budget and stall window (shared with `llmbus up`), from HealthConfig."""
    add_options(p, HealthConfig)


def policy_config(args: argparse.Namespace, heartbeat_interval: float = 0.5) -> HealthConfig:
    return HealthConfig(heartbeat_interval=heartbeat_interval, **options_of(HealthConfig, args))


def parse_children(specs: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, rest = spec.partition("=")
        if not sep or not name or not rest.strip():
            raise ValueError(f"--child {spec!r}: expected NAME=ARGS")
        if name in out:
            raise ValueError(f"--child {name!r} given twice")
        out[name] = shlex.split(rest)
    return out


def build(args: argparse.Namespace, config):
    from pathlib import Path

    from bus.machine import machine_id
    from .children import ChildrenMode
    from .processes import Children
    from .service import HealthService, HealthServiceConfig
    from .systemd import SystemdMode

    children = parse_children(args.child)
    if args.watch_units and args.mode != "systemd":
        raise ValueError("--watch-unit is for --mode systemd")
    if args.mode == "children":
        if not children:
            raise ValueError("--mode children needs at least one --child NAME=ARGS")
        mode = ChildrenMode(Children(log_dir=Path(args.logs) if args.logs else None), children)
    elif children:
        raise ValueError("--child is for --mode children; under systemd the units run the services")
    else:
        mode = SystemdMode(machine_id(), args.watch_units)
        if not args.watch_units:
            print("llmbus run health: no --watch-unit: this watcher reports services but acts "
                  "on none (`llmbus install-units` lists this machine's units in health.env)",
                  file=sys.stderr)
    return HealthService(config, mode, HealthServiceConfig(
        policy=policy_config(args, config.bus.heartbeat_interval)))
