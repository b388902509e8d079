"""`llmbus up`: the whole stack on this machine, under one parent, until Ctrl-C or SIGTERM.

Runs the health watcher (services/health, `health-0` on the bus) in this process, in mode
`children`: it starts a tokenizer, N shard runners over contiguous layer ranges, a scheduler and
the HTTP gateway, each its own process that dies with this one, and once the stack is ready kills
a child that stops heartbeating or stalls, starts again one that exits (with back-off; a
respawn forks from a warm fork server, services/health/forkserver.py, on the same RPC and PUB
ports), and gives up on one that keeps failing (`health.service_failed`); the scheduler carries
its requests through. They find each other as static peers on loopback (no multicast needed). `llmbus chat`
finds the stack through a small file in the runtime folder.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

from bus.options import add_options, argv_of, options_of
from services.scheduler.config import SchedulerServiceConfig
from services.shard.config import ShardConfig, positive   # light: no numpy
from services.tokenizer.cli import CHAT_TEMPLATE_HELP, chat_template

SHARD_OPTIONS = ("codec", "num_pages", "device")
SCHEDULER_OPTIONS = ("max_queue", "max_batch_tokens", "phrase_repeats")
GATEWAY_OPTIONS = ("allowed_hosts", "cors_origins")


def gateway_config() -> type:
    """The gateway's config dataclass, whose GATEWAY_OPTIONS `up` takes and hands on (the
    commands start the gateway by name, as `llmbus run gateway`, and never import it)."""
    from .run import kind_module
    return kind_module("gateway").CONFIG


def add_parser(sub) -> None:
    p = sub.add_parser("up", help="run tokenizer, scheduler, shards and gateway here until Ctrl-C")
    p.add_argument("--model", default=None, metavar="FILE|NAME",
                   help="GGUF file, or a name `llmbus pull` knows (pulled first if it must be); "
                        "default: the default model, pulled")
    p.add_argument("--chat-template", default=None, metavar="NAME|FILE", help=CHAT_TEMPLATE_HELP)
    p.add_argument("--shards", type=int, default=2, help="shard processes to cut the model into")
    p.add_argument("--replicas", type=positive, default=1,
                   help="shard processes per range: each whole set is one more pipeline the "
                        "scheduler runs (more throughput; a lost replica's requests move on)")
    p.add_argument("--threads", type=positive, default=None,
                   help="native kernel threads per shard (default: this process's cores divided among the shards)")
    p.add_argument("--inflight", type=int, default=0,
                   help="micro-batches in the pipeline at once (0: one per shard range, so "
                        "every stage has work; more only split the batch)")
    # What the shards and the scheduler take as their own options, handed on as given.
    add_options(p, ShardConfig, SHARD_OPTIONS)
    add_options(p, SchedulerServiceConfig, SCHEDULER_OPTIONS)
    add_options(p, gateway_config(), GATEWAY_OPTIONS)
    p.add_argument("--cluster", default=None, help="bus cluster name (default: a private one)")
    p.add_argument("--port", type=int, default=0, help="scheduler RPC port (default: any free)")
    p.add_argument("--http", default="127.0.0.1:8080", metavar="HOST:PORT",
                   help="address of the gateway's HTTP API (OpenAI, Anthropic, Ollama)")
    p.add_argument("--api-key-file", type=Path, default=None,
                   help="file with the API key HTTP clients must send (default: $LLMBUS_API_KEY)")
    from .stacks import add_key_arguments
    add_key_arguments(p)
    p.add_argument("--logs", type=Path, default=None,
                   help="folder for the services' logs (default: in the runtime folder)")
    p.add_argument("-d", "--detach", action="store_true",
                   help="run in the background once ready; `llmbus down` stops it")
    from services.health.cli import add_policy_arguments
    add_policy_arguments(p)
    p.set_defaults(func=main)
    down = sub.add_parser("down", help="stop a stack started with `llmbus up --detach`")
    down.add_argument("--cluster", default=None, help="which stack (default: the newest)")
    down.add_argument("--all", action="store_true", help="every stack running on this machine")
    down.set_defaults(func=_down)


def _down(args: argparse.Namespace) -> int:
    from .detach import stop_stacks
    return stop_stacks(args)


def main(args: argparse.Namespace) -> int:
    from services.modelstore.pull import PullError

    from .preflight import refusal
    from .stacks import running
    try:
        why = refusal(http=args.http, cluster=args.cluster, rpc_port=args.port, stacks=running())
    except ValueError as e:
        why = f"--http: {e}"
    if why:                    # before anything starts: no service, no download
        print(f"llmbus up: {why}", file=sys.stderr)
        return 2
    if args.detach:
        from .detach import detach
        return detach(args)
    try:
        return asyncio.run(_up(args))
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, PullError) as e:   # bad option values, a bad model file, no GPU
        print(f"llmbus up: {e}", file=sys.stderr)
        return 2


def _fixed_port(http: str) -> str:
    """HOST:PORT with a port of its own for HOST:0 (any free port): the watcher starts a gateway
    again on the address its clients were given, as it does every child's bus ports."""
    from services.health.processes import free_port
    host, sep, port = http.rpartition(":")
    return f"{host}:{free_port()}" if sep and port == "0" else http


def _shard_name(start: int, replica: int) -> str:
    """shard-13 for the first process of layers from 13, shard-13-r1 for its first replica."""
    return f"shard-{start}" + (f"-r{replica}" if replica else "")


def say(text: str) -> None:
    print(f"[llmbus up] {text}", file=sys.stderr, flush=True)


async def _up(args) -> int:
    from .stacks import private_cluster, stack_key_of

    config = gateway_config()
    config(**options_of(config, args))   # a bad --cors-origin fails before anything starts
    cluster = args.cluster or private_cluster()
    key, own_key = stack_key_of(args, cluster)   # so does a bad key file
    try:
        return await _serve(args, cluster, key)
    finally:
        if own_key is not None:
            own_key.unlink(missing_ok=True)


async def _serve(args, cluster: str, key) -> int:
    import zmq.asyncio

    from bus.config import BusConfig, ServiceConfig
    from services.health.children import ChildrenMode
    from services.health.processes import Children, free_port
    from services.health.cli import policy_config
    from services.health.service import HealthService, HealthServiceConfig
    from services.modelstore.pull import pull
    from services.modelstore.gguf_meta import read_metadata

    from services.shard.config import default_threads
    from services.scheduler.placement.policy import head_cost_in_layers, split_layers
    from .stacks import busctl_hint, register, runtime_dir

    if args.device == "cuda":      # no GPU: say why before anything starts
        from services.shard.cli import device_unavailable
        why = device_unavailable(args.device)
        if why:
            raise ValueError(f"--device cuda: {why}")
    model = _model_file(args.model, pull)
    meta = read_metadata(model)
    template = chat_template(args.chat_template, model)
    arch = meta.get("general.architecture", "?")
    n_layers = int(meta.get(f"{arch}.block_count", 0))
    ranges = split_layers(n_layers, args.shards, head_cost_in_layers(meta))
    threads = args.threads or default_threads(len(ranges) * args.replicas)
    # One micro-batch per stage: each shard works on one while the others work on theirs. With
    # 3 one-thread shards on 2 cores, 1 in flight left the pipeline serial (37 tok/s at 32
    # streams, bench.serve), 3 gave 62-66; a fourth only split the batch (55-65), and a second
    # batch for a lone 2-thread shard cost 16% (it runs one batch at a time anyway).
    inflight = args.inflight or len(ranges)
    logs = args.logs or runtime_dir() / "logs" / cluster
    sched_port = args.port or free_port()
    # The watcher first: a directory confirms static peers one by one, and one that is down
    # (waiting out its handshake) must not hide the service that says why it is down.
    ports = {"health-0": free_port(), "tokenizer-0": free_port(), "scheduler-0": sched_port,
             "gateway-0": free_port(), **{_shard_name(a, r): free_port() for a, _ in ranges
                                          for r in range(args.replicas)}}
    # Each child's PUB port is fixed too: a respawned child binds the address its subscribers
    # are still connected to, so they hear its first heartbeats without a new handshake.
    pub_ports = {name: free_port() for name in ports}
    peers = [f"127.0.0.1:{p}" for p in ports.values()]
    common = ["--cluster", cluster, "--no-mdns", *[a for p in peers for a in ("--peer", p)]]
    if key is not None:
        common += ["--key-file", str(args.key_file.resolve())]
    specs = {
        "tokenizer-0": ["run", "tokenizer", "--model", str(model)]
        + (["--chat-template", template] if template else []),
        **{_shard_name(a, r): ["run", "shard", "--model", str(model), "--layers", f"{a}:{b}",
                               *argv_of(ShardConfig, args, SHARD_OPTIONS), "--threads", str(threads)]
            for a, b in ranges for r in range(args.replicas)},
        "scheduler-0": ["run", "scheduler", "--inflight", str(inflight),
                        *argv_of(SchedulerServiceConfig, args, SCHEDULER_OPTIONS)],
        "gateway-0": ["run", "gateway", "--http", _fixed_port(args.http),
                      *argv_of(gateway_config(), args, GATEWAY_OPTIONS)]
        + (["--api-key-file", str(args.api_key_file.resolve())] if args.api_key_file else []),
    }
    specs = {name: [*spec, "--name", name, "--rpc-port", str(ports[name]),
                    "--pub-port", str(pub_ports[name]), *common]
             for name, spec in specs.items()}
    bus = BusConfig(cluster=cluster, mdns=False, peers=tuple(peers), key=key)
    health = policy_config(args, bus.heartbeat_interval)   # bad values fail before anything starts
    kids = Children(log_dir=logs)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ctx = zmq.asyncio.Context()
    # The watcher starts the children and hears their heartbeats; it acts once the stack is
    # ready (a child failing while starting ends `llmbus up` with its log instead).
    watcher = HealthService(
        ServiceConfig(name="health-0", kind="health", bus=bus, rpc_port=ports["health-0"],
                      pub_port=pub_ports["health-0"],
                      discover=True),
        ChildrenMode(kids, specs, stop_first=("gateway-0", "scheduler-0")),
        HealthServiceConfig(policy=health, watch_at_start=False), ctx=ctx)
    watcher.on_event.append(lambda e: _tell(e, logs))
    stack_file = None
    t0 = time.monotonic()
    try:
        await watcher.start()
        directory = watcher.directory
        say(f"starting {len(specs)} services: model {model.name}, {len(ranges)} shards "
            f"{[f'{a}:{b}' for a, b in ranges]}"
            + (f" x {args.replicas} replicas (one pipeline each)" if args.replicas > 1 else "")
            + (" on the GPU" if args.device == "cuda" else f" of {threads} thread(s) each")
            + f", {inflight} micro-batch(es) in flight, "
            f"logs in {logs}")
        if not await _wait_ready(directory, kids, stop, logs):
            return 0 if stop.is_set() else 1
        endpoint = f"tcp://127.0.0.1:{sched_port}"
        http = directory.get("gateway-0").info.http
        stack_info = {"scheduler": f"127.0.0.1:{sched_port}", "http": http, "peers": peers,
                      **({"key_file": str(args.key_file.resolve())} if key else {}),
                      "model": str(model), "shards": len(ranges), "logs": str(logs)}
        stack_file = register(cluster, stack_info)
        stack_info["cluster"] = cluster
        say(f"ready in {time.monotonic() - t0:.1f}s. Scheduler at {endpoint} (cluster {cluster}).")
        print(f"llmbus is up: HTTP API at {http} (OpenAI, Anthropic, Ollama); talk to it with "
              f"`llmbus chat`; inspect it with `{busctl_hint(cluster, args.cluster is not None)}`"
              f"{' (no bus key: any local user may call it)' if key is None else ''}"
              f". Ctrl-C stops it.", flush=True)
        watcher.watch()
        await stop.wait()
        return 0
    finally:
        say("stopping")
        try:
            await watcher.shutdown()   # stops the children (gateway and scheduler first)
        finally:
            kids.stop()                # a no-op unless the watcher failed before stopping them
        ctx.destroy(linger=0)          # a socket left open must not hold the shutdown
        if stack_file is not None:
            stack_file.unlink(missing_ok=True)
        say("stopped")


def _model_file(given: str | None, pull) -> Path:
    """--model as a file: a path, or a pull name (pulled now, with progress, if not yet)."""
    from services.modelstore.pull import DEFAULT_MODEL, MODELS, spec_named
    spec = DEFAULT_MODEL if given is None else spec_named(given)
    if spec is not None and not Path(given or "").is_file():
        say(f"model {spec.name}")
        return pull(spec, quiet=False).resolve()
    model = Path(given).expanduser().resolve()
    if not model.is_file():
        raise ValueError(f"--model {given}: no such file, and not a model `llmbus pull` knows "
                         f"({', '.join(sorted(MODELS))})")
    return model


def _tell(e, logs: Path) -> None:
    say(f"{e.kind}: {e.service}: {e.reason}")
    if e.kind == "service_failed":
        say(f"{e.service} is given up; its log ends:\n{_tail(logs / f'{e.service}.log')}")


async def _wait_ready(directory, kids, stop: asyncio.Event, logs: Path) -> bool:
    """Until the scheduler is ready (it is ready once the tokenizer and every shard are) and
    the gateway serves HTTP."""
    t0 = last_report = time.monotonic()
    states: dict[str, str] = {}
    while not stop.is_set():
        for e in directory.live():     # a stage line as each service comes up
            if states.get(e.name) != e.state:
                states[e.name] = e.state
                say(f"{e.name}: {e.state} ({time.monotonic() - t0:.1f}s)")
        sched, gateway = directory.get("scheduler-0"), directory.get("gateway-0")
        if (sched is not None and sched.state == "ready" and gateway is not None
                and gateway.state == "ready" and gateway.info.model):
            return True
        failed = kids.exited()
        if failed:
            for name, rc in failed.items():
                say(f"{name} exited with status {rc} while starting:\n{_tail(logs / f'{name}.log')}")
            return False
        if time.monotonic() - last_report > 10:
            states = {e.name: e.state for e in directory.live()}
            say(f"still starting: {states or 'no service answered yet'}")
            last_report = time.monotonic()
        await asyncio.sleep(0.1)
    return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
