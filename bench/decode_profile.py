"""Single-stream decode time per token, split by the kind of work: each kind of C op, the head, the rest.

    OPENBLAS_NUM_THREADS=1 python3 bench/decode_profile.py [--model PATH] [--reps 200] [--context 64]
        [--threads 1]

One sequence with a `--context`-token prompt in its cache decodes one token per forward, always at
the same position (the KV slot is rewritten, so every step does the same work). The forward is timed
as a whole; then the layers' ops of each kind (kernels.program: qmatmul, attend, rms_norm, ...) are
run alone, as the forward ran them, on the same buffers, and the output head on its own.
"everything else" is the forward minus all of those: embedding, the plan, RoPE tables, Python. Each
figure is the best of several rounds, the rounds interleaved (a 2-core machine shared with others is
noisy). Ops run alone find their inputs in cache more often than in the forward, so they read low.
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
from services.shard.kv_cache import KVConfig, PagedKVCache  # noqa: E402
from services.shard.model import ShardModel  # noqa: E402
from services.shard.native_layers import NativeLayers  # noqa: E402


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the pulled default model)")
    ap.add_argument("--reps", type=int, default=200, help="decode steps per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the best is reported")
    ap.add_argument("--context", type=int, default=64, help="tokens in the cache before the timed token")
    ap.add_argument("--threads", type=int, default=1, help="native kernel threads")
    return ap.parse_args()


def per_call(fn, reps: int) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def main() -> None:
    args = parse()
    native_lib.set_threads(args.threads)
    path = args.model or pull()
    loaded = load_weights(path, 0, read_config(path)[0].n_layers, "quantized")
    cfg = loaded.config
    kv = PagedKVCache.for_model(cfg, 0, cfg.n_layers, KVConfig(num_pages=64, page_size=16))
    model = ShardModel(cfg, loaded.weights, kv)
    if not isinstance(model.runner, NativeLayers):
        sys.exit("the native library is not built: nothing to split (pip install -e . with a C compiler)")
    pages = PageAllocator(kv.num_pages, kv.page_size)
    prompt = np.random.default_rng(0).integers(3, min(cfg.vocab_size, 49000), size=args.context).tolist()
    model.forward(build_batch([Chunk(0, prompt, 0)], pages))
    batch = build_batch([Chunk(0, [11], args.context)], pages)
    for _ in range(3):
        model.forward(batch)                                      # warm: pages touched, caches filled
    program = next(iter(model.runner.scratches[1].programs.values()))
    kinds = list(dict.fromkeys(program.names()))
    parts = {name: program.only(name) for name in kinds}
    x = np.random.default_rng(1).standard_normal((1, cfg.d_model)).astype(np.float32)
    def head():
        return model.runner.head(x, model.output_norm, model.output, cfg.norm_eps)

    timed = {"forward": lambda: model.forward(batch), **parts, "head (norm + matmul)": head}
    best = {name: float("inf") for name in timed}
    for _ in range(args.rounds):                                  # interleaved: all see the same load
        for name, fn in timed.items():
            best[name] = min(best[name], per_call(fn, args.reps))
    model.forward(batch)                                          # the buffers as a forward leaves them
    print(f"single-stream decode, context {args.context}, {native_lib.threads()} thread(s), "
          f"{len(program.names())} C ops per token in the layers, best of {args.rounds} rounds x {args.reps} "
          f"tokens, load average {os.getloadavg()[0]:.2f}")
    for name in timed:
        count = f" ({program.names().count(name)} ops)" if name in parts else ""
        print(f"{name + count:36s} {best[name] * 1e3:7.3f} ms/token")
    rest = best["forward"] - sum(v for k, v in best.items() if k != "forward")
    print(f"{'everything else (the difference)':36s} {rest * 1e3:7.3f} ms/token")


if __name__ == "__main__":
    main()
