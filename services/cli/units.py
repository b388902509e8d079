"""`llmbus install-units`: the systemd units of systemd/ written for this machine: its python,
its model, its shard instances, and the one cluster file every unit reads."""

from __future__ import annotations

import argparse
import os
import pwd
import shlex
import sys
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "systemd"
SERVICES = ("llmbus-tokenizer.service", "llmbus-scheduler.service", "llmbus-gateway.service")


def add_parser(sub) -> None:
    p = sub.add_parser("install-units", help="write systemd units for the services of this machine")
    p.add_argument("--prefix", type=Path, default=None,
                   help="folder for the units (default: /etc/systemd/system, or "
                        "~/.config/systemd/user with --user)")
    p.add_argument("--user", action="store_true", help="units for the user's own systemd")
    p.add_argument("--conf", type=Path, default=None,
                   help="folder of cluster.env and shard-N.env (default: /etc/llmbus, or "
                        "~/.config/llmbus with --user)")
    p.add_argument("--model", type=Path, default=None, help="GGUF file (default: the pulled one)")
    p.add_argument("--shards", type=int, default=1, help="shard runners on this machine")
    p.add_argument("--layers", action="append", default=[], metavar="A:B",
                   help="the layer range of each shard here (repeatable; default: the model cut "
                        "into --shards ranges, all here)")
    p.add_argument("--placed", action="store_true",
                   help="the --shards here get no --layers: the scheduler's placement gives each "
                        "its range (instances HOST-0, HOST-1...: unique across machines)")
    p.add_argument("--memory", default=None, metavar="SIZE",
                   help="what each placed shard offers placement (e.g. 6G; implies --placed; "
                        "default: the free RAM when it starts)")
    p.add_argument("--key-file", type=Path, default=None,
                   help="the cluster's CURVE key file (`llmbus keygen`), mode 0600, readable by "
                        "--run-as: every unit then takes it (LLMBUS_KEY_FILE in cluster.env)")
    p.add_argument("--services", default="tokenizer,scheduler,gateway",
                   help="which of tokenizer, scheduler, gateway run here ('' for none)")
    p.add_argument("--cluster", default="default")
    p.add_argument("--peer", action="append", default=[], metavar="HOST:PORT")
    p.add_argument("--http", default="127.0.0.1:8080", help="the gateway's HTTP address")
    p.add_argument("--run-as", default="", metavar="USER",
                   help="user the services run as (default: the manager's; the watcher stays root)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        written = install(args)
    except (ValueError, OSError) as e:
        print(f"llmbus install-units: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    unit_dir = written[0].parent
    ctl = "systemctl --user" if args.user else "systemctl"
    print(f"written to {unit_dir}; start with `{ctl} daemon-reload && {ctl} enable --now "
          f"llmbus.target`", file=sys.stderr)
    return 0


def shard_instances(args: argparse.Namespace, model: Path) -> dict[str, str]:
    """Each shard unit's instance -> its LLMBUS_ARGS: a range by hand, or a memory budget."""
    if not (args.placed or args.memory):
        return {str(a): f"--layers {a}:{b}" for a, b in shard_ranges(args, model)}
    from services.shard.config import parse_memory

    from .run import default_name
    if args.layers:
        raise ValueError("--placed shards get their ranges from placement: leave out --layers")
    if args.memory:
        try:
            parse_memory(args.memory)
        except argparse.ArgumentTypeError as e:
            raise ValueError(str(e)) from None
    budget = f"--memory {args.memory}" if args.memory else ""
    # shard-HOST-i: placed shards of several machines must not share a name on the bus.
    return {default_name("shard", str(i)).removeprefix("shard-"): budget for i in range(args.shards)}


def key_file(args: argparse.Namespace) -> str:
    """The checked key file's absolute path, or "" without one."""
    if args.key_file is None:
        return ""
    from bus.curve import read_key_file
    path = args.key_file.resolve()
    read_key_file(path)                  # KeyFileError (a ValueError) says what is wrong
    if args.run_as and not args.user:
        try:
            uid = pwd.getpwnam(args.run_as).pw_uid
        except KeyError:
            raise ValueError(f"--run-as {args.run_as}: no such user") from None
        if os.stat(path).st_uid != uid:
            raise ValueError(f"{path} must belong to {args.run_as}, who runs the services and "
                             f"alone may read it: `chown {args.run_as} {path}`")
    return str(path)


def shard_ranges(args: argparse.Namespace, model: Path) -> list[tuple[int, int]]:
    from services.shard.config import parse_layers

    from services.scheduler.placement.policy import head_cost_in_layers, split_layers
    if args.layers:
        try:
            return [parse_layers(spec) for spec in args.layers]
        except argparse.ArgumentTypeError as e:
            raise ValueError(str(e)) from None
    if args.shards == 0:
        return []
    from services.modelstore.gguf_meta import read_metadata
    meta = read_metadata(model)
    arch = meta.get("general.architecture", "?")
    return split_layers(int(meta.get(f"{arch}.block_count", 0)), args.shards,
                        head_cost_in_layers(meta))


def install(args: argparse.Namespace) -> list[Path]:
    """Write the units, llmbus.target wanting them, and the env files; returns the unit files."""
    from bus.config import BusConfig
    BusConfig(cluster=args.cluster, peers=tuple(args.peer))     # bad names fail here
    home = Path.home()
    prefix = args.prefix or (home / ".config/systemd/user" if args.user else Path("/etc/systemd/system"))
    conf = (args.conf or (home / ".config/llmbus" if args.user else Path("/etc/llmbus"))).resolve()
    if args.model is None:
        from services.modelstore.pull import pull
        args.model = pull(quiet=True)
    model = args.model.resolve()
    if not model.is_file():
        raise ValueError(f"no model file at {model}")
    services = [s for s in args.services.split(",") if s]
    unknown = set(services) - {"tokenizer", "scheduler", "gateway"}
    if unknown:
        raise ValueError(f"--services: unknown {sorted(unknown)}; of tokenizer, scheduler, gateway")
    shards = shard_instances(args, model)
    key_path = key_file(args)
    sandbox = f"User={args.run_as}" if args.run_as and not args.user else ""
    gateway_user, gateway_key = sandbox, ""
    if not args.user and not args.run_as:
        # The gateway faces HTTP clients: never root. A user of its own for the unit's life,
        # reading the cluster key as a credential systemd hands it (it cannot read root's file).
        gateway_user = "DynamicUser=yes" + (f"\nLoadCredential=cluster.key:{key_path}"
                                            if key_path else "")
        gateway_key = "--key-file ${CREDENTIALS_DIRECTORY}/cluster.key " if key_path else ""
    fill = {"@PYTHON@": sys.executable, "@CONF@": str(conf), "@SANDBOX@": sandbox,
            "@GATEWAY_USER@": gateway_user, "@GATEWAY_KEY@": gateway_key}
    wanted = [f"llmbus-{s}.service" for s in services] + [f"llmbus-shard@{i}.service" for i in shards]
    prefix.mkdir(parents=True, exist_ok=True)
    conf.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("llmbus-health.service", "llmbus-shard@.service", *SERVICES, "llmbus.target"):
        text = (TEMPLATES / name).read_text()
        for key, value in {**fill, "@WANTS@": "Wants=" + " ".join(wanted) if wanted else ""}.items():
            text = text.replace(key, value)
        (prefix / name).write_text(text)
        written.append(prefix / name)
    env = {"LLMBUS_CLUSTER": args.cluster, "LLMBUS_PEERS": ",".join(args.peer),
           "LLMBUS_MODEL": str(model), "LLMBUS_HTTP": args.http,
           **({"LLMBUS_KEY_FILE": key_path} if key_path else {})}
    (conf / "cluster.env").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))
    for instance, shard_args in shards.items():
        (conf / f"shard-{instance}.env").write_text(f'LLMBUS_ARGS="{shard_args}"\n')
    # The watcher's own config: the units it may act on, and none other (it runs as root).
    owned = " ".join(f"--watch-unit {u}" for u in wanted)
    (conf / "health.env").write_text(f'LLMBUS_HEALTH_ARGS="{owned}"\n')
    return written
