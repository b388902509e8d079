"""The engine's own rates, as bench/forward.py and bench/scale.py time them: aggregate decode of a
batch of sequences after a prompt each, and the prefill of one prompt, through ForwardBatch."""

from __future__ import annotations

import statistics
import time

import numpy as np

from services.shard.inprocess import Chunk, PageAllocator, build_batch
from services.shard.model import ShardModel

TOKEN_IDS = [3, 49000]    # prompts draw ids from here; a bench bounds it by the model's vocabulary


def prompt(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(*TOKEN_IDS, size=n).tolist()


def decode_rate(model: ShardModel, batch: int, steps: int, context: int, clock=time.perf_counter) -> float:
    """Aggregate tokens/s of `batch` sequences decoding together after a `context`-token prompt each,
    from the median step (a step another process's burst slowed does not move it; llama.cpp's side,
    bench/llamacpp_figures.py, is timed alike) (`clock`: time.thread_time counts only this thread's CPU time, for a one-thread run on a busy machine)."""
    pages = PageAllocator(model.kv.num_pages, model.kv.page_size)
    seqs = list(range(batch))
    model.forward(build_batch([Chunk(s, prompt(context, s), 0) for s in seqs], pages))
    times = []
    for step in range(steps):
        t = clock()
        model.forward(build_batch([Chunk(s, [11 + s], context + step) for s in seqs], pages))
        times.append(clock() - t)
    return batch / statistics.median(times)


def prefill_rate(model: ShardModel, n: int, runs: int = 2, clock=time.perf_counter) -> float:
    """Tokens/s of one n-token prompt, best of `runs` (as llama.cpp's is measured)."""
    best = float("inf")
    for _ in range(runs):
        pages = PageAllocator(model.kv.num_pages, model.kv.page_size)
        t = clock()
        model.forward(build_batch([Chunk(0, prompt(n), 0)], pages))
        best = min(best, clock() - t)
    return n / best
