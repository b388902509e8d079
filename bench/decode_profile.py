"""Single-stream decode time per token, split into the quantized matmuls and everything else.

    OPENBLAS_NUM_THREADS=1 python3 bench/decode_profile.py [--model PATH] [--reps 200] [--context 64]

One sequence with a `--context`-token prompt in its cache decodes one token per forward, always
at the same position (the KV slot is rewritten, so every step does the same work). The forward is
timed as a whole; then every qmatmul call it made (recorded once, inputs copied) is replayed
alone with the same inputs in the same order. "everything else" is forward minus the replay:
norms, rope, KV writes, attention, SwiGLU, residuals, embedding, array allocation, Python. As a
cross-check, the forward is also timed with qmatmul replaced by a stub that copies in the recorded
results (it leaves out whatever the matmuls' memory traffic costs the rest, so it reads lower).
Both are the best of several rounds (a 2-core machine shared with others is noisy).
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

import kernels.qmatmul as qm  # noqa: E402
from services.modelstore.pull import pull  # noqa: E402
from services.modelstore.weight_cache import load_weights  # noqa: E402
from services.modelstore.weights import read_config  # noqa: E402
from services.shard.kv_cache import KVConfig, PagedKVCache  # noqa: E402
from services.shard.inprocess import Chunk, PageAllocator, build_batch  # noqa: E402
from services.shard.model import ShardModel  # noqa: E402


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the pulled default model)")
    ap.add_argument("--reps", type=int, default=200, help="decode steps per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the best is reported")
    ap.add_argument("--context", type=int, default=64, help="tokens in the cache before the timed token")
    return ap.parse_args()


import services.shard.native_layers as native_layers  # noqa: E402

# The layer loop binds its projections once (kernels.qmatmul.bound_qmatmul), past this script's
# reach: here they call qmatmul through a name it patches (a bound call saves ~1 us of checks).
native_layers.qmatmul = qm.qmatmul
native_layers.bound_qmatmul = lambda x, w, out: lambda: native_layers.qmatmul(x, w, out)


def patched_qmatmul(fn):
    """Put fn in place of kernels.qmatmul.qmatmul in every module that imported it; returns an undo."""
    real = qm.qmatmul
    mods = [m for m in list(sys.modules.values())
            if m is not None and m is not qm and getattr(m, "qmatmul", None) is real]
    for m in mods:
        m.qmatmul = fn

    def undo():
        for m in mods:
            m.qmatmul = real
    return undo


def record_calls(make, batch) -> list[tuple]:
    """(x, w, result) of every qmatmul call one forward makes, copied; make() builds the model
    (after the patch: a model may bind qmatmul when it is built)."""
    calls, real = [], qm.qmatmul

    def spy(x, w, out=None):
        r = real(x, w, out)
        calls.append((np.array(x, copy=True), w, r.copy()))
        return r

    undo = patched_qmatmul(spy)
    try:
        make().forward(batch)
    finally:
        undo()
    return calls


def stubbed(calls):
    """A qmatmul that hands back the recorded results in order: the forward without the matmuls."""
    i = 0

    def stub(x, w, out=None):
        nonlocal i
        r = calls[i][2]
        i = (i + 1) % len(calls)
        if out is None:
            return r
        out[...] = r
        return out
    return stub


def best_per_call(fn, reps: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def main() -> None:
    args = parse()
    path = args.model or pull()
    loaded = load_weights(path, 0, read_config(path)[0].n_layers, "quantized")
    cfg = loaded.config
    kv = PagedKVCache.for_model(cfg, 0, cfg.n_layers, KVConfig(num_pages=64, page_size=16))
    model = ShardModel(cfg, loaded.weights, kv)
    pages = PageAllocator(kv.num_pages, kv.page_size)
    prompt = np.random.default_rng(0).integers(3, 49000, size=args.context).tolist()
    model.forward(build_batch([Chunk(0, prompt, 0)], pages))
    batch = build_batch([Chunk(0, [11], args.context)], pages)
    for _ in range(3):
        model.forward(batch)                                      # warm: pages touched, caches filled
    make = lambda: ShardModel(cfg, loaded.weights, kv)           # noqa: E731  (the cache carries the state)
    calls = record_calls(make, batch)
    outs = [np.empty((x.shape[0], w.rows), np.float32) for x, w, _ in calls]

    def replay():
        for (x, w, _), o in zip(calls, outs):
            qm.qmatmul(x, w, o)

    def forward():
        model.forward(batch)

    undo = patched_qmatmul(stubbed(calls))
    try:
        bare_model = make()
        bare = best_per_call(lambda: bare_model.forward(batch), args.reps, args.rounds)
    finally:
        undo()
    fwd = qmm = float("inf")
    for _ in range(args.rounds):                                  # interleaved: both see the same load
        fwd = min(fwd, best_per_call(forward, args.reps, 1))
        qmm = min(qmm, best_per_call(replay, args.reps, 1))
    print(f"single-stream decode, context {args.context}, native kernel "
          f"{'built' if qm.available() else 'NOT built'}, {len(calls)} qmatmul calls per token, "
          f"best of {args.rounds} rounds x {args.reps} tokens, load average {os.getloadavg()[0]:.2f}")
    print(f"forward                            {fwd * 1e3:7.3f} ms/token")
    print(f"qmatmul (its calls replayed alone) {qmm * 1e3:7.3f} ms/token")
    print(f"everything else (the difference)   {(fwd - qmm) * 1e3:7.3f} ms/token")
    print(f"forward with qmatmul stubbed out   {bare * 1e3:7.3f} ms/token (results copied in from a recording)")


if __name__ == "__main__":
    main()
