"""A shard's start, as the health watcher respawns it: a new interpreter (`python -m
services.cli run shard ...`) against a fork of the warm fork server, side by side in one run
(alternating, so both see the same machine load). For each it prints the time from the spawn
to the handshake answered (imports, arguments, bind) and to the first heartbeat heard (the
weights loaded from the cache: `ready`), the medians, and their ratio.

    python3 -m bench.respawn [--runs 5] [--model F.gguf] [--layers 0:10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zmq  # noqa: E402
import zmq.asyncio  # noqa: E402

import wire  # noqa: E402
from bus.client import RpcClient  # noqa: E402
from bus.errors import BusError  # noqa: E402
from bus.sockets import SUBSCRIPTIONS, endpoint, make_socket  # noqa: E402
from services.health.processes import Children, free_port  # noqa: E402
from services.modelstore.pull import pull  # noqa: E402


async def start_once(ctx, kids: Children, model: Path, layers: str) -> tuple[float, float]:
    """(handshake, first heartbeat) seconds after the spawn of one shard."""
    rpc, pub = free_port(), free_port()
    sub = make_socket(ctx, zmq.SUB, SUBSCRIPTIONS)   # connected before the spawn, as a watcher's
    sub.setsockopt(zmq.SUBSCRIBE, b"bus.heartbeat")
    sub.connect(endpoint("127.0.0.1", pub))
    args = ["run", "shard", "--model", str(model), "--layers", layers, "--name", "shard-b",
            "--rpc-port", str(rpc), "--pub-port", str(pub), "--cluster", "bench-respawn",
            "--no-mdns", "--no-discover"]
    t0 = time.monotonic()
    p = kids.start("shard-b", args)
    try:
        ep = endpoint("127.0.0.1", rpc)
        while True:
            client = RpcClient(ctx, ep, sender="bench", name=ep)
            try:
                await client.handshake("bench-respawn", timeout=0.05)
                break
            except (BusError, wire.BadFrame):
                if p.poll() is not None:
                    raise RuntimeError(f"the shard exited with status {p.returncode}") from None
            finally:
                await client.close()
        handshake = time.monotonic() - t0
        await asyncio.wait_for(sub.recv_multipart(), 60)
        return handshake, time.monotonic() - t0
    finally:
        p.terminate()
        p.wait(30)
        sub.close(linger=0)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--layers", default="0:10")
    args = ap.parse_args()
    model = args.model or pull()
    ctx = zmq.asyncio.Context()
    with tempfile.TemporaryDirectory() as logs:
        fresh, warm = Children(log_dir=Path(logs)), Children(log_dir=Path(logs))
        warm.fork_respawns()
        deadline = time.monotonic() + 120
        while not warm.forks.ready:
            if warm.forks.error or time.monotonic() > deadline:
                raise SystemExit(f"bench.respawn: {warm.forks.error or 'fork server not warm'}")
            await asyncio.sleep(0.05)
        times: dict[str, list[tuple[float, float]]] = {"new interpreter": [], "fork server": []}
        for _ in range(args.runs):
            times["new interpreter"].append(await start_once(ctx, fresh, model, args.layers))
            times["fork server"].append(await start_once(ctx, warm, model, args.layers))
        warm.stop()
    ctx.destroy(linger=0)
    print(f"shard {args.layers} of {model.name}, {args.runs} starts each, alternating")
    med = {}
    for how, runs in times.items():
        med[how] = (statistics.median(h for h, _ in runs), statistics.median(b for _, b in runs))
        print(f"  {how:16s} handshake " + " ".join(f"{h:.2f}" for h, _ in runs)
              + f"  (median {med[how][0]:.2f} s); first heartbeat "
              + " ".join(f"{b:.2f}" for _, b in runs) + f"  (median {med[how][1]:.2f} s)")
    print(f"  first heartbeat, new interpreter / fork server: "
          f"{med['new interpreter'][1] / med['fork server'][1]:.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
