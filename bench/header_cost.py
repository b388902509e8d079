"""What a batch's header costs a shard at every hop: decoding the `shard.forward` it receives,
building the one it hands on (wire.evolve) and encoding that, for a decode step of S sequences on
a 3-stage route.

Each is timed hot (the same call over and over: best of 5) and cold: right after streaming 64 MB
through the caches, as a shard's weights do between two of its steps (median of 300). On a
pipeline the cold figure is the one a token pays, once per hop.

    python3 -m bench.header_cost            # S = 1 and 8, about 20 s
    python3 -m bench.header_cost --seqs 32
"""

from __future__ import annotations

import argparse
import os
import time
import timeit

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import wire  # noqa: E402
from wire.messages.sampling import SamplingParams  # noqa: E402
from wire.messages.shard import Forward, Hop, ReplyTo, RouteStage  # noqa: E402

EVICT_BYTES = 64 << 20
COLD_REPS = 300


def decode_step(seqs: int, d_model: int = 576, pages: int = 8) -> wire.Message:
    """The `shard.forward` the second stage of a 3-stage route receives for a greedy decode step."""
    body = Forward(
        batch_id=7, first_layer=10, positions=list(range(100, 100 + seqs)), query_lens=[1] * seqs,
        page_table=[list(range(s * pages, (s + 1) * pages)) for s in range(seqs)],
        hidden=wire.Tensor(np.random.default_rng(0).standard_normal((seqs, d_model), np.float32), "fp16"),
        sampling=[SamplingParams(temperature=0.0, seed=1234)] * seqs, steps=[5] * seqs,
        route=[RouteStage("shard-0", 1), RouteStage("shard-13", 1), RouteStage("shard-25", 1)], hop=1,
        reply_to=ReplyTo("scheduler", 99), hops=[Hop("shard-0", 4, 0.3, 2.9)], sent_at=time.time())
    return wire.Message(body=body, id=5, sender="shard-0", epoch=1, deadline=time.time() + 30)


def hot_us(fn) -> float:
    timer = timeit.Timer(fn)
    number, took = timer.autorange()
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def cold_us(fn, evict: np.ndarray) -> float:
    times = []
    for _ in range(COLD_REPS):
        evict.sum()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", default="1,8", help="sequences in the decode step, a list: 1,8")
    args = ap.parse_args(argv)
    evict = np.ones(EVICT_BYTES, np.uint8)
    print(f"a shard's batch header per hop, us (hot: best of 5; cold: median of {COLD_REPS} "
          f"after streaming {EVICT_BYTES >> 20} MB)")
    print(f"  {'seqs':>4}  {'frames':>6} {'header B':>8}  {'decode':>14}  {'evolve':>14}  {'encode':>14}")
    for s in (int(x) for x in args.seqs.split(",")):
        msg = decode_step(s)
        frames = [bytes(f) for f in wire.encode(msg)]
        got = wire.decode(frames).body
        out = np.zeros((s, 576), np.float32)

        def dec():
            return wire.decode(frames)

        def evolve():
            return wire.evolve(got, first_layer=20, tokens=None, hop=2,
                               hidden=wire.Tensor(out, "fp16"),
                               hops=[*got.hops, Hop("shard-13", 1152 * s, 0.3, 2.5)],
                               sent_at=time.time())

        onward = wire.Message(body=evolve(), id=6, sender="shard-13", epoch=1, deadline=msg.deadline)

        def enc():
            return wire.encode(onward)

        cells = [f"{hot_us(f):5.1f} / {cold_us(f, evict):5.1f}" for f in (dec, evolve, enc)]
        print(f"  {s:>4}  {len(frames):>6} {len(frames[0]):>8}  " + "  ".join(f"{c:>14}" for c in cells))
    print("  (each cell: hot / cold)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
