"""Resident memory of a CPU shard against what it holds: the range's bytes in the GGUF plus its KV cache.

    python3 -m bench.shard_memory [--model PATH] [--ranges 0:9,9:18] [--pages 256] [--cold]

Each range runs in a fresh process (so its baseline is an interpreter with everything imported):
it loads the range as a shard does (quantized blocks mapped from the weight cache, which this
script builds first in its own process), then makes every page resident, as a long-running shard's would be: every weight page
is read and the whole KV pool written, and one 64-token forward runs. The growth of RSS over the
baseline is compared with the range's GGUF bytes (a tied head counted once) plus the KV pool's
bytes; issue 14's bound is 10% over. With --cold each range's process builds its cache entry itself,
into a temporary cache of its own, as a shard pinned to a range does on its first start: what it
holds after that load is measured the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BOUND = 1.10


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the pulled default model)")
    ap.add_argument("--ranges", default="", help="layer ranges A:B,... (default: whole, then halves)")
    ap.add_argument("--pages", type=int, default=256, help="KV pages of 16 tokens per shard")
    ap.add_argument("--cold", action="store_true", help="each range's process builds its own cache entry")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)   # internal: measure one range
    return ap.parse_args()


def gguf_range_bytes(path: Path, a: int, b: int) -> int:
    """Bytes of the tensors a shard of [a, b) holds, as stored in the GGUF."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    names = {t.name: int(t.n_bytes) for t in r.tensors}
    n = 1 + max(int(k.split(".")[1]) for k in names if k.startswith("blk."))
    held = {k for k in names if k.startswith("blk.") and a <= int(k.split(".")[1]) < b}
    if a == 0:
        held.add("token_embd.weight")
    if b == n:
        held |= {"output_norm.weight", "output.weight" if "output.weight" in names else "token_embd.weight"}
    return sum(names[k] for k in held if k in names)


def resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_one(path: Path, a: int, b: int, pages: int, cold: bool = False) -> dict:
    import tempfile

    import numpy as np
    from services.modelstore.weight_cache import load_weights, page_in
    from services.shard.service import weight_format
    from services.shard.batch import ForwardBatch
    from services.shard.inprocess import Chunk, PageAllocator, build_batch
    from services.shard.kv_cache import KVConfig, PagedKVCache
    from services.shard.model import ShardModel
    base = resident()
    root = Path(tempfile.mkdtemp(prefix="shard-memory-")) if cold else None
    w = load_weights(path, a, b, weight_format("cpu", "quantized"), root=root)
    assert w.cold == cold, "a cold run found its entry built, or a warm one did not"
    kv = PagedKVCache.for_model(w.config, a, b, KVConfig(num_pages=pages, page_size=16))
    model = ShardModel(w.config, w.weights, kv)
    page_in(w.weights)                            # one byte of every page: resident
    kv.k[...] = 0
    kv.v[...] = 0
    batch = build_batch([Chunk(0, list(range(1, 65)), 0)], PageAllocator(kv.num_pages, kv.page_size))
    if not model.first:
        batch = ForwardBatch(positions=batch.positions, query_lens=batch.query_lens,
                             page_table=batch.page_table,
                             hidden=np.full((64, w.config.d_model), 0.01, dtype=np.float32))
    model.forward(batch)
    out = {"growth": resident() - base, "kv": kv.nbytes(), "held": w.weights.nbytes()}
    if root is not None:
        import shutil
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> int:
    args = parse()
    from services.modelstore.pull import pull
    path = args.model or pull()
    if args.one:
        a, b = map(int, args.one.split(":"))
        print(json.dumps(measure_one(path, a, b, args.pages, args.cold)))
        return 0
    from services.modelstore.footprint import read_footprint
    n = read_footprint(path).n_layers
    ranges = ([tuple(map(int, r.split(":"))) for r in args.ranges.split(",")] if args.ranges
              else [(0, n), (0, n // 2), (n // 2, n)])
    print(f"{path.name}: {n} layers, KV pool {args.pages} pages of 16 tokens per shard, bound {BOUND:.2f}x, "
          f"{'cold: each range builds its cache entry' if args.cold else 'warm cache'}")
    worst = 0.0
    from services.modelstore.weight_cache import load_weights
    from services.shard.service import weight_format
    for a, b in ranges:
        if not args.cold:
            load_weights(path, a, b, weight_format("cpu", "quantized"))      # a warm cache, as a respawned shard finds it
        out = subprocess.run([sys.executable, "-m", "bench.shard_memory", "--model", str(path),
                              "--pages", str(args.pages), "--one", f"{a}:{b}"] + (["--cold"] if args.cold else []),
                             capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
        m = json.loads(out.stdout.strip().splitlines()[-1])
        want = gguf_range_bytes(path, a, b) + m["kv"]
        ratio = m["growth"] / want
        worst = max(worst, ratio)
        print(f"layers {a:>2}:{b:<2}  GGUF {(want - m['kv']) / 2**20:7.1f} MiB + KV {m['kv'] / 2**20:6.1f} MiB"
              f" = {want / 2**20:7.1f} MiB; held {m['held'] / 2**20:7.1f} MiB; RSS growth "
              f"{m['growth'] / 2**20:7.1f} MiB: {ratio:.3f}x")
    print(f"worst {worst:.3f}x of GGUF range + KV: {'MET' if worst <= BOUND else 'NOT MET'} (bound {BOUND:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
