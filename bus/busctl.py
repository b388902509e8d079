"""busctl: inspect and poke the bus.

    busctl list                      every service seen, with its heartbeat, and as its machine's
                                     health watcher sees it (state, restarts, last error)
    busctl status NAME               one service's own status and counters
    busctl kill NAME [--signal S]    ask the watcher of NAME's machine to signal it (drills)
    busctl monitor [TOPIC]           live events (all but heartbeats unless TOPIC says so)
    busctl call NAME METHOD [JSON]   send one message (METHOD is its wire type) and print the reply

Add --json for scripts. When nothing is found, busctl says what discovery saw and why.
With no --peer or --interface, it looks first at the stack `llmbus up` runs here (the newest, or
the one of --cluster): its own file names its services and its key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

EXIT_NOT_FOUND = 3


def _jsonable(v: Any) -> Any:
    from wire import Tensor
    from wire.schema import to_wire

    def put(t: Tensor) -> dict:
        return {"tensor": {"codec": t.codec, "dtype": t.dtype, "shape": list(t.shape)}}

    data = to_wire(v, put)

    def clean(x):
        if isinstance(x, bytes):
            return x.hex()
        if isinstance(x, dict):
            return {k: clean(y) for k, y in x.items()}
        if isinstance(x, list):
            return [clean(y) for y in x]
        return x

    return clean(data)


class Ctl:
    def __init__(self, args: argparse.Namespace, config):
        import zmq.asyncio

        self.args = args
        self.ctx = zmq.asyncio.Context()
        self.config = config
        self._zc = None
        self.directory = None

    async def __aenter__(self):
        from bus.directory import Directory
        from bus.mdns import open_zeroconf

        if self.config.mdns and not self.config.mdns_interfaces and not self.config.advertise_host:
            # busctl binds nothing others dial: it browses every interface (loopback among
            # them), so that a cluster's services on other machines are found too.
            self._zc = open_zeroconf((), "")
        self.directory = Directory(self.ctx, self.config, me=f"busctl-{os.getpid()}", zeroconf=self._zc)
        await self.directory.start()
        return self

    async def __aexit__(self, *exc):
        await self.directory.stop()
        if self._zc is not None:
            await self._zc.async_close()
        self.ctx.destroy(linger=0)     # never block exit on a socket something left open

    def out(self, data: Any, text: str) -> None:
        print(json.dumps(data, indent=2, sort_keys=True) if self.args.json else text, flush=True)

    async def find(self, name: str):
        from bus.errors import ServiceNotFound
        try:
            return await self.directory.wait_for(name, self.args.wait)
        except ServiceNotFound as e:
            print(f"busctl: {e}", file=sys.stderr)
            return None


async def cmd_list(ctl: Ctl) -> int:
    from wire.messages.info import info_map
    await asyncio.sleep(ctl.args.wait)
    now = time.monotonic()
    live = ctl.directory.live()
    for name, eps in ctl.directory.clashes().items():
        print(f"busctl: NAME CLASH: two live services are named {name} ({' and '.join(eps)}); "
              "the one heard first keeps the name while it lives: give each its own --name",
              file=sys.stderr)
    watched = await _watched(ctl, live)
    rows = [{"name": e.name, "kind": e.kind, "instance": e.instance, "host": e.host,
             "rpc_port": e.rpc_port, "epoch": e.epoch, "state": e.state, "load": e.load,
             "progress": e.progress, "heartbeat_age_s": round(now - e.last_seen, 2),
             "machine": e.machine, "pid": e.pid, "unit": e.unit, "info": info_map(e.info)}
            for e in live]
    seen = {r["name"] for r in rows}
    # What watchers know but the bus no longer hears (down, failed) is listed too.
    rows += [{"name": n, "kind": "", "instance": "", "host": "", "rpc_port": 0, "epoch": 0,
              "state": "", "load": 0.0, "progress": 0, "heartbeat_age_s": None, "machine": "",
              "pid": w["pid"], "unit": w["unit"], "info": {}}
             for n, w in watched.items() if n not in seen]
    for r in rows:
        w = watched.get(r["name"])
        r["health"] = w               # None: no watcher answers for it
        if w is not None:
            r["state"] = w["state"]
    rows.sort(key=lambda r: r["name"])
    if not rows:
        print(f"busctl: no services found ({ctl.directory.explain()})", file=sys.stderr)
        if ctl.args.json:
            print("[]")
        return EXIT_NOT_FOUND
    header = (f"{'NAME':<18} {'KIND':<10} {'HOST':<22} {'STATE':<9} {'RESTARTS':>8} {'LOAD':>5} "
              f"{'AGE':>6}  LAST ERROR")
    lines = [header] + [
        f"{r['name']:<18} {r['kind']:<10} "
        f"{(r['host'] + ':' + str(r['rpc_port'])) if r['host'] else '-':<22} {r['state']:<9} "
        f"{r['health']['restarts'] if r['health'] else '-':>8} {r['load']:>5.1f} "
        f"{'-' if r['heartbeat_age_s'] is None else format(r['heartbeat_age_s'], '.1f') + 's':>6}  "
        f"{(r['health'] or {}).get('last_error', '')}"
        for r in rows]
    if not any(r["kind"] == "health" for r in rows):
        lines.append("(no health watcher on the bus: states are the services' own)")
    ctl.out(rows, "\n".join(lines))
    return 0


async def _watched(ctl: Ctl, live) -> dict[str, dict]:
    """What every live health watcher says of the services it watches, by name."""
    from bus.client import RpcClient
    from bus.errors import BusError
    from wire.messages.health import HealthStatus

    async def ask(e):
        async with RpcClient(ctl.ctx, e.rpc_endpoint, sender=ctl.directory.me, name=e.name,
                             key=ctl.config.key) as c:
            try:
                return await c.call(HealthStatus(), ctl.args.timeout)
            except BusError as err:
                print(f"busctl: health watcher {e.name} did not answer: {err}", file=sys.stderr)
                return None

    replies = await asyncio.gather(*(ask(e) for e in live if e.kind == "health"))
    return {w.name: {"state": w.state, "restarts": w.restarts, "last_error": w.last_error,
                     "pid": w.pid, "unit": w.unit, "watcher": r.watcher}
            for r in replies if r is not None for w in r.services}


async def cmd_kill(ctl: Ctl) -> int:
    from wire.messages.health import Kill
    name = ctl.args.name
    try:
        body = Kill(name=name, signal=ctl.args.signal)
        body.check()
    except ValueError as e:
        print(f"busctl: {e}", file=sys.stderr)
        return 2
    deadline = time.monotonic() + ctl.args.wait
    while True:   # the watcher of NAME's machine lists it in its heartbeat
        watchers = [e for e in ctl.directory.of_kind("health") if name in e.info.watching]
        if watchers or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    if not watchers:
        print(f"busctl: no health watcher watches {name!r} "
              f"({ctl.directory.explain()})", file=sys.stderr)
        return EXIT_NOT_FOUND
    reply = await _call(ctl, watchers[0].name, body)
    if reply is None:
        return EXIT_NOT_FOUND
    ctl.out(_jsonable(reply), f"sent {reply.signal} to {reply.name} (pid {reply.pid}) "
                              f"through {watchers[0].name}")
    return 0


async def cmd_status(ctl: Ctl) -> int:
    from wire.messages.bus import Status
    reply = await _call(ctl, ctl.args.name, Status())
    if reply is None:
        return EXIT_NOT_FOUND
    data = _jsonable(reply)
    text = "\n".join(f"{k}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(data.items()))
    ctl.out(data, text)
    return 0


async def cmd_call(ctl: Ctl) -> int:
    import wire
    import wire.envelope  # noqa: F401  (registers every message type)
    from wire.schema import REGISTRY, from_wire

    cls = REGISTRY.get(ctl.args.method)
    if cls is None:
        print(f"busctl: unknown method {ctl.args.method!r}; known: {', '.join(sorted(REGISTRY))}",
              file=sys.stderr)
        return 2
    try:
        raw = json.loads(ctl.args.body)
    except json.JSONDecodeError as e:
        print(f"busctl: body is not JSON: {e}", file=sys.stderr)
        return 2

    def no_tensor(v, path):
        raise wire.BadFrame("schema", f"{path}: tensors cannot be given as JSON")

    try:
        body = from_wire(cls, raw, no_tensor)
    except wire.BadFrame as e:
        print(f"busctl: bad body for {ctl.args.method}: {e.detail or e}", file=sys.stderr)
        return 2
    reply = await _call(ctl, ctl.args.name, body)
    if reply is None:
        return EXIT_NOT_FOUND
    data = {"type": type(reply).TYPE, "body": _jsonable(reply)}
    ctl.out(data, json.dumps(data, indent=2, sort_keys=True))
    return 0


async def _call(ctl: Ctl, name: str, body: Any):
    from bus.client import RpcClient
    from bus.errors import BusError, RemoteError
    from bus.sockets import limits_for_kind

    entry = await ctl.find(name)
    if entry is None:
        return None
    async with RpcClient(ctl.ctx, entry.rpc_endpoint, sender=ctl.directory.me, name=name,
                         limits=limits_for_kind(entry.kind), key=ctl.config.key) as c:
        try:
            return await c.call(body, ctl.args.timeout)
        except RemoteError as e:
            print(f"busctl: {name} answered {e.code}: {e.message}", file=sys.stderr)
            raise SystemExit(1)
        except BusError as e:
            print(f"busctl: {e}", file=sys.stderr)
            raise SystemExit(1)


async def cmd_monitor(ctl: Ctl) -> int:
    topic = ctl.args.topic or ""
    ctl.directory.subscribe(topic.encode())
    seen = 0
    done = asyncio.Event()

    def show(t: bytes, msg) -> None:
        nonlocal seen
        name = t.decode(errors="replace")
        if not topic and name == "bus.heartbeat":
            return
        if topic and not name.startswith(topic):
            return
        seen += 1
        data = {"topic": name, "sender": msg.sender, "epoch": msg.epoch, "type": msg.type,
                "body": _jsonable(msg.body)}
        text = f"{time.strftime('%H:%M:%S')} {name:<16} {msg.sender:<16} {json.dumps(data['body'], sort_keys=True)}"
        print(json.dumps(data, sort_keys=True) if ctl.args.json else text, flush=True)
        if ctl.args.count and seen >= ctl.args.count:
            done.set()

    ctl.directory.on_event.append(show)
    try:
        await asyncio.wait_for(done.wait(), ctl.args.duration or None)
    except asyncio.TimeoutError:
        pass
    return 0 if seen or not ctl.args.count else EXIT_NOT_FOUND


def build_parser(env: dict) -> argparse.ArgumentParser:
    from bus.cli_args import add_bus_arguments

    p = argparse.ArgumentParser(prog="busctl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        add_bus_arguments(sp, env)
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        sp.add_argument("--wait", type=float, default=2.0, help="seconds to discover services")
        sp.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a reply")

    sp = sub.add_parser("list", help="every service seen")
    common(sp)
    sp.set_defaults(func=cmd_list)
    sp = sub.add_parser("status", help="one service's status")
    common(sp)
    sp.add_argument("name")
    sp.set_defaults(func=cmd_status)
    sp = sub.add_parser("monitor", help="live events")
    common(sp)
    sp.add_argument("topic", nargs="?", default="")
    sp.add_argument("--count", type=int, default=0, help="stop after N events")
    sp.add_argument("--duration", type=float, default=0, help="stop after S seconds")
    sp.set_defaults(func=cmd_monitor)
    sp = sub.add_parser("kill", help="ask the watcher of a service's machine to signal it")
    common(sp)
    sp.add_argument("name")
    sp.add_argument("--signal", default="SIGTERM", type=lambda v: v if v.startswith("SIG") else "SIG" + v,
                    help="SIGTERM (default), SIGKILL, SIGSTOP, SIGCONT, ... (the SIG may be left off)")
    sp.set_defaults(func=cmd_kill)
    sp = sub.add_parser("call", help="send one message and print the reply")
    common(sp)
    sp.add_argument("name")
    sp.add_argument("method", help="message type, e.g. bus.status or bus.echo")
    sp.add_argument("body", nargs="?", default="{}", help="JSON body")
    sp.set_defaults(func=cmd_call)
    return p


def stack_config(args: argparse.Namespace, argv: list[str], env: dict):
    """The bus of the stack `llmbus up` runs here (the newest, or the one of --cluster), from
    its own file: its peers and its key. None when the options name where to look (--peer,
    --interface) or no such stack runs; then discovery goes as the options say."""
    from bus.config import BusConfig
    from bus.curve import read_key_file
    from bus.stacks import running

    if args.peers or args.interfaces:
        return None
    stacks = running(env)
    if "LLMBUS_CLUSTER" in env or any(a == "--cluster" or a.startswith("--cluster=") for a in argv):
        stacks = [s for s in stacks if s.get("cluster") == args.cluster]
    if not stacks:
        return None
    s = stacks[0]
    key_file = args.key_file or (s.get("key_file") and Path(s["key_file"]))
    return BusConfig(cluster=s["cluster"], mdns=False, peers=tuple(s.get("peers", ())),
                     heartbeat_interval=args.heartbeat,
                     key=read_key_file(key_file) if key_file else None)


def main(argv: list[str] | None = None) -> int:
    from bus.cli_args import bus_config

    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ)
    args = build_parser(env).parse_args(argv)
    try:
        config = stack_config(args, argv, env) or bus_config(args, binds=False)
    except ValueError as e:
        print(f"busctl: {e}", file=sys.stderr)
        return 2

    async def go() -> int:
        async with Ctl(args, config) as ctl:
            return await args.func(ctl)

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
