"""Native paged attention benchmark: long prompts (every row alone, as plan_attention hands them) and decode.

    OPENBLAS_NUM_THREADS=1 python3 bench/attention.py [--repeats 3] [--shape smollm2|gemma3]

Prompt cases: n query rows of one sequence, row i seeing keys 0..i over the same pages (a prompt's
rows, each attending alone); prints ms per layer, x its layers, and ns per (row, head, key seen).
Decode cases: batch 1 and 16 sequences of ~64-100 keys, each over its own scattered pages; prints
microseconds per layer. Shapes: SmolLM2-135M's (9 query heads, 3 KV heads, head_dim 64, 30 layers)
or Gemma 3 270M's (4 query heads, 1 KV head, head_dim 256, a window of 512 keys: its local layers,
18 counted); pages of 16.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from kernels.attention_native import attend_decode_paged  # noqa: E402

F = np.float32
PAGE = 16
SHAPES = {"smollm2": dict(h=9, kvh=3, dh=64, window=0, layers=30),
          "gemma3": dict(h=4, kvh=1, dh=256, window=512, layers=18)}


def best_time(args, repeats: int) -> float:
    """Seconds per call, best of `repeats` after one warm-up call."""
    attend_decode_paged(*args)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        attend_decode_paged(*args)
        best = min(best, time.perf_counter() - t)
    return best


def prompt_case(n: int, h: int, kvh: int, dh: int, window: int, **_):
    """A prompt of n rows: row i is a query over keys 0..i of one sequence's pages."""
    rng = np.random.default_rng(0)
    npages = n // PAGE
    k = rng.standard_normal((npages, PAGE, kvh, dh), dtype=F).astype(np.float16)
    v = rng.standard_normal((npages, PAGE, kvh, dh), dtype=F).astype(np.float16)
    q = rng.standard_normal((n, h, dh), dtype=F)
    table = np.tile(np.arange(npages, dtype=np.int32), (n, 1))
    lens = np.arange(1, n + 1, dtype=np.int32)
    return q, k, v, table, lens, F(0.125), window


def decode_case(batch: int, h: int, kvh: int, dh: int, window: int, num_pages: int = 256, **_):
    """`batch` sequences of 64-100 keys each, over disjoint pages in a shuffled cache."""
    rng = np.random.default_rng(1)
    k = rng.standard_normal((num_pages, PAGE, kvh, dh), dtype=F).astype(np.float16)
    v = rng.standard_normal((num_pages, PAGE, kvh, dh), dtype=F).astype(np.float16)
    q = rng.standard_normal((batch, h, dh), dtype=F)
    lens = rng.integers(64, 101, batch).astype(np.int32)
    n_pages = 7                                               # ceil(100 / 16)
    table = rng.permutation(num_pages)[:batch * n_pages].reshape(batch, n_pages).astype(np.int32)
    return q, k, v, table, lens, F(0.125), window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    a = ap.parse_args()
    shape = SHAPES[a.shape]
    for n in (256, 1024):
        dt = best_time(prompt_case(n, **shape), a.repeats)
        seen = sum(min(i, shape["window"] or i) for i in range(1, n + 1))
        per = dt / (seen * shape["h"]) * 1e9
        print(f"prompt n={n}: {dt * 1e3:.1f} ms per layer, x{shape['layers']} = {dt * shape['layers']:.2f} s; "
              f"per (row,head,key) {per:.2f} ns")
    for batch in (1, 16):
        dt = best_time(decode_case(batch, **shape), max(a.repeats, 200))
        print(f"decode batch={batch}: {dt * 1e6:.1f} us per layer")


if __name__ == "__main__":
    main()
