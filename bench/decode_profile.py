"""Decode time per step, split where it is spent: each kind of C op, the head, the rest.

    OPENBLAS_NUM_THREADS=1 python3 bench/decode_profile.py [--model PATH] [--reps 200] [--context 64]
        [--threads 1,2] [--rows 1]

One sequence (or `--rows` of them, each with a prompt of its own: a decode batch of the serving
path) with a `--context`-token prompt in its cache decodes one token per forward, always at the
same position (the KV slot is rewritten, so every step does the same work). Each op of the
layers' Program is timed where it runs, between the others (kernels.program `time_ops`: the clock
read in C around each op), and the output head (final norm and matmul) around its call; "the rest"
is the forward minus both: embedding, the batch checks, the plan, RoPE tables, Python. The last line
is not a part of the forward: the weights alone, the layers' matmuls back to back and then the head
(on the same buffers, nothing else run between them), what a token costs where memory and the
matmuls are all there is. The forward's gain over threads lies between this line's and that of
the rest of its time (attention, norms, Python; mostly serial): below this line's wherever the rest
gains less. With several
thread counts the rounds alternate between them (a 2-core machine shared with others is noisy),
each figure is the best round's, and the last column is the first count's time over the last's:
how each part scales.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")     # before numpy is imported: BLAS reads it once
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from kernels import native_lib  # noqa: E402
from services.modelstore.pull import pull  # noqa: E402
from services.modelstore.weight_cache import load_weights  # noqa: E402
from services.modelstore.weights import read_config  # noqa: E402
from services.shard.inprocess import Chunk, PageAllocator, build_batch  # noqa: E402
from services.shard.service import weight_format  # noqa: E402
from services.shard.kv_cache import KVConfig, PagedKVCache  # noqa: E402
from services.shard.model import ShardModel  # noqa: E402
from services.shard.native_layers import NativeLayers  # noqa: E402


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the pulled default model)")
    ap.add_argument("--reps", type=int, default=200, help="decode steps per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per thread count; the best is reported")
    ap.add_argument("--context", type=int, default=64, help="tokens in the cache before the timed token")
    ap.add_argument("--threads", default="1", help="native kernel threads, or a list of counts: 1,2")
    ap.add_argument("--rows", type=int, default=1,
                    help="sequences decoding together: a step of one token each (a batch of the serving path)")
    return ap.parse_args()


class HeadClock:
    """Wraps the runner's head: seconds spent in it so far."""

    def __init__(self, runner):
        self.seconds, self._head = 0.0, runner.head
        runner.head = self

    def __call__(self, *args):
        self.args = args                        # the last call's: the weights-alone timing repeats it
        t = time.perf_counter()
        try:
            return self._head(*args)
        finally:
            self.seconds += time.perf_counter() - t


def one_round(model, batch, program, head: HeadClock, matmuls, reps: int) -> dict:
    """ms per token of the forward, each kind of op, the head and the rest, over `reps` steps; then of
    the weights alone: the layers' matmuls back to back and the head after them, nothing else."""
    program.op_ns[:] = 0
    head.seconds = 0.0
    t = time.perf_counter()
    for _ in range(reps):
        model.forward(batch)
    forward = (time.perf_counter() - t) / reps * 1e3
    out = {"forward": forward}
    for name, ns in zip(program.names(), program.op_ns):
        out[name] = out.get(name, 0.0) + ns / reps / 1e6
    out["head (norm + matmul)"] = head.seconds / reps * 1e3
    out["the rest (Python, embedding, plan)"] = forward - sum(v for k, v in out.items() if k != "forward")
    t = time.perf_counter()
    for _ in range(reps):
        matmuls()
        head._head(*head.args)
    out[WEIGHTS_ALONE] = (time.perf_counter() - t) / reps * 1e3
    return out


WEIGHTS_ALONE = "weights alone (matmuls + head)"


def main() -> None:
    args = parse()
    counts = [int(c) for c in args.threads.split(",")]
    path = args.model or pull()
    loaded = load_weights(path, 0, read_config(path)[0].n_layers, weight_format("cpu", "quantized"))
    cfg = loaded.config
    pages_each = args.context // 16 + 2
    kv = PagedKVCache.for_model(cfg, 0, cfg.n_layers, KVConfig(num_pages=max(64, args.rows * pages_each), page_size=16))
    model = ShardModel(cfg, loaded.weights, kv)
    if not isinstance(model.runner, NativeLayers):
        sys.exit("the native library is not built: nothing to split (pip install -e . with a C compiler)")
    pages = PageAllocator(kv.num_pages, kv.page_size)
    rng = np.random.default_rng(0)
    for s in range(args.rows):
        prompt = rng.integers(3, min(cfg.vocab_size, 49000), size=args.context).tolist()
        model.forward(build_batch([Chunk(s, prompt, 0)], pages))
    batch = build_batch([Chunk(s, [11], args.context) for s in range(args.rows)], pages)
    for _ in range(3):
        model.forward(batch)                                      # warm: pages touched, caches filled
    program = next(iter(model.runner.scratches[args.rows].programs.values()))
    matmuls = program.only("qmatmul")                             # untimed: its own buffers' ops
    program.time_ops()
    head = HeadClock(model.runner)
    model.forward(batch)                                          # head.args: the call to repeat
    best: dict[int, dict] = {}
    for _ in range(args.rounds):                                  # interleaved: all see the same load
        for n in counts:
            native_lib.set_threads(n)
            got = one_round(model, batch, program, head, matmuls, args.reps)
            if n not in best or got["forward"] < best[n]["forward"]:
                best[n] = got
    what = "single-stream decode" if args.rows == 1 else f"decode of {args.rows} sequences together"
    print(f"{what}, context {args.context}, {len(program.names())} C ops per step in the "
          f"layers, best of {args.rounds} rounds x {args.reps} steps per thread count, load average "
          f"{os.getloadavg()[0]:.2f}; ms per step")
    print(f"{'':36s}" + "".join(f"{f'{n} thread(s)':>13s}" for n in counts)
          + (f"{f'{counts[0]} / {counts[-1]}':>10s}" if len(counts) > 1 else ""))
    for name in best[counts[0]]:
        count = program.names().count(name)
        label = name + (f" ({count} ops)" if count else "")
        ratio = f"{best[counts[0]][name] / best[counts[-1]][name]:9.2f}x" if len(counts) > 1 else ""
        print(f"{label:36s}" + "".join(f"{best[n][name]:13.3f}" for n in counts) + ratio)


if __name__ == "__main__":
    main()
