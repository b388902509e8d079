"""The parts bench/simulate.py models a pipeline from, measured on this machine.

Engine costs, in one process on `threads` threads: a layer's decode at each batch of rows (each
row one token of its own sequence, after 32 tokens of context), a layer's prefill of one
sequence's chunk at each length, and the last stage's output norm, head and greedy sampling at
each batch, all from a few layers of a model of the shape (bench/synthetic.py). Timings are the
median of `reps` after a warm-up.

Serving overheads, from `llmbus up` stacks of a tiny model (2 layers of width 256: its compute
is a few hundred microseconds a token) with 1 and 2 shards: one more stage adds one hop, so the
difference of their decode round trips is a hop's software (both ends, on loopback), and what is
left of the 1-shard round trip past its two hops is the scheduler's per micro-batch.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

DECODE_ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
PREFILL_TOKENS = (16, 32, 64, 128, 256)
CONTEXT = 32


def _timed(fn, reps: int) -> float:
    """The median of `reps` timings after a warm-up: what a step typically costs on this machine,
    as the served runs it is checked against pay it. (The least of them, taken before, picked the
    fastest moment of this VM, whose memory reads 13-23 GB/s from minute to minute.)"""
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def engine_costs(model: Path, threads: int, layers: int = 2, reps: int = 7) -> dict:
    """layer_decode, layer_prefill and head tables (seconds) for the model's shape."""
    from kernels.hugepages import advise_hugepages
    from kernels.native_lib import set_threads
    from services.modelstore.footprint import read_footprint
    from services.modelstore.weight_cache import load_weights
    from services.shard.service import weight_format
    from services.shard.batch import ForwardBatch
    from services.shard.inprocess import Chunk, PageAllocator, build_batch
    from services.shard.kv_cache import KVConfig, PagedKVCache
    from services.shard.model import ShardModel

    set_threads(threads)
    advise_hugepages(False)
    n = read_footprint(model).n_layers
    pages = (max(DECODE_ROWS) * (CONTEXT + 16) + max(PREFILL_TOKENS)) // 16 + 8

    def shard(a: int, b: int):
        w = load_weights(model, a, b, weight_format("cpu", "quantized"))      # what a CPU shard loads
        kv = PagedKVCache.for_model(w.config, a, b, KVConfig(num_pages=pages, page_size=16))
        return w.config, ShardModel(w.config, w.weights, kv)

    def hidden_batch(config, chunks, alloc, want_logits=None):
        b = build_batch(chunks, alloc, want_logits)
        rng = np.random.default_rng(0)
        h = rng.standard_normal((len(b.positions), config.d_model)).astype(np.float32)
        return ForwardBatch(positions=b.positions, query_lens=b.query_lens, page_table=b.page_table,
                            hidden=h, want_logits=b.want_logits)

    mid = max(1, min(n - layers - 1, n // 2))
    config, inner = shard(mid, mid + layers)
    out = {"layer_decode": {}, "layer_prefill": {}, "head": {},
           "d_model": config.d_model, "n_layers": n}
    alloc = PageAllocator(pages, 16)
    for rows in DECODE_ROWS:
        for s in range(rows):      # each sequence's context, written once
            if ("ctx", s) not in alloc.owned:
                inner.forward(hidden_batch(config, [Chunk(("ctx", s), list(range(CONTEXT)), 0)], alloc))
        step = hidden_batch(config, [Chunk(("ctx", s), [1], CONTEXT) for s in range(rows)], alloc)
        out["layer_decode"][rows] = _timed(lambda: inner.forward(step), reps) / layers
    for tokens in PREFILL_TOKENS:
        chunk = hidden_batch(config, [Chunk(("p", tokens), list(range(tokens)), 0)], alloc)
        out["layer_prefill"][tokens] = _timed(lambda: inner.forward(chunk), reps) / layers
        alloc.release(("p", tokens))
    del inner
    from kernels.sampling import sample
    from wire.messages.sampling import SamplingParams
    config, last = shard(n - 1, n)
    alloc = PageAllocator(pages, 16)
    greedy = SamplingParams(temperature=0.0)
    for rows in DECODE_ROWS:
        for s in range(rows):
            if ("ctx", s) not in alloc.owned:
                last.forward(hidden_batch(config, [Chunk(("ctx", s), list(range(CONTEXT)), 0)], alloc,
                                          want_logits=[False]))
        step = hidden_batch(config, [Chunk(("ctx", s), [1], CONTEXT) for s in range(rows)], alloc)

        def head_step():
            logits = last.forward(step)
            sample(logits, [greedy] * rows, [[]] * rows, [0] * rows)

        out["head"][rows] = max(0.0, _timed(head_step, reps) - out["layer_decode"][rows])
    return out


def serving_overheads(tokens: int = 48, rounds: int = 3) -> dict:
    """hop_overhead and step_overhead (seconds) from tiny-model stacks of 1 and 2 shards,
    alternated `rounds` times; the least of the rounds."""
    import asyncio

    from bench.hosts_client import load
    from bench.serve_stack import LocalStack
    from bench.synthetic import Shape, synthetic_model

    tiny = synthetic_model(Shape(2, 256, 512, 4, 2), "q4_0")
    itl = {1: [], 2: []}
    for _ in range(rounds):
        for shards in (1, 2):
            with LocalStack(shards, model=tiny, pages=64, up_args=("--threads", "1")) as stack:
                asyncio.run(load(stack.http, 1, 8, {}))          # warm
                got = asyncio.run(load(stack.http, 1, tokens, {}))
                itl[shards].append(got["itl_ms"] / 1000)
    # The least of the rounds: on a busy machine a round's figure is the overheads plus waits
    # for the cores, and the waits are what differs from round to round.
    one, two = min(itl[1]), min(itl[2])
    hop = max(two - one, 0.0)
    return {"hop_overhead": hop, "step_overhead": max(one - 2 * hop, 0.0),
            "itl_1_shard_s": one, "itl_2_shards_s": two}
