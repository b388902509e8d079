"""Native paged attention benchmark: long prompts (every row alone, as plan_attention hands them) and decode.

    OPENBLAS_NUM_THREADS=1 python3 bench/attention.py [--repeats 3]

Prompt cases: n query rows of one sequence, row i seeing keys 0..i over the same pages (a prompt's
rows, each attending alone); prints ms per layer, x30 layers, and ns per (row, head, key).
Decode cases: batch 1 and 16 sequences of ~64-100 keys, each over its own scattered pages; prints
microseconds per layer. Shapes are SmolLM2-135M's: 9 query heads, 3 KV heads, head_dim 64, page 16.
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
H, KVH, DH, PAGE = 9, 3, 64, 16


def best_time(args, repeats: int) -> float:
    """Seconds per call, best of `repeats` after one warm-up call."""
    attend_decode_paged(*args)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        attend_decode_paged(*args)
        best = min(best, time.perf_counter() - t)
    return best


def prompt_case(n: int):
    """A prompt of n rows: row i is a query over keys 0..i of one sequence's pages."""
    rng = np.random.default_rng(0)
    npages = n // PAGE
    k = rng.standard_normal((npages, PAGE, KVH, DH), dtype=F)
    v = rng.standard_normal((npages, PAGE, KVH, DH), dtype=F)
    q = rng.standard_normal((n, H, DH), dtype=F)
    table = np.tile(np.arange(npages, dtype=np.int32), (n, 1))
    lens = np.arange(1, n + 1, dtype=np.int32)
    return q, k, v, table, lens, F(0.125)


def decode_case(batch: int, num_pages: int = 256):
    """`batch` sequences of 64-100 keys each, over disjoint pages in a shuffled cache."""
    rng = np.random.default_rng(1)
    k = rng.standard_normal((num_pages, PAGE, KVH, DH), dtype=F)
    v = rng.standard_normal((num_pages, PAGE, KVH, DH), dtype=F)
    q = rng.standard_normal((batch, H, DH), dtype=F)
    lens = rng.integers(64, 101, batch).astype(np.int32)
    n_pages = 7                                               # ceil(100 / 16)
    table = rng.permutation(num_pages)[:batch * n_pages].reshape(batch, n_pages).astype(np.int32)
    return q, k, v, table, lens, F(0.125)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    for n in (256, 1024):
        dt = best_time(prompt_case(n), a.repeats)
        per = dt / (n * (n + 1) / 2 * H) * 1e9
        print(f"prompt n={n}: {dt * 1e3:.1f} ms per layer, x30 = {dt * 30:.2f} s; per (row,head,key) {per:.2f} ns")
    for batch in (1, 16):
        dt = best_time(decode_case(batch), max(a.repeats, 200))
        print(f"decode batch={batch}: {dt * 1e6:.1f} us per layer")


if __name__ == "__main__":
    main()
