"""Where a GPU decode step's time goes: the host's share (check and stage the batch, copy its header),
the replayed graph's GPU time, the sampler's, and each kernel's GPU time inside the step (read by
torch's profiler, whose CUPTI sees every kernel of the process, cupy's included), for one shape and
batch. A tool for working on the GPU path; bench/gpu.py gives the figures.

    python3 bench/gpu_profile.py [--shape smollm2-135m] [--batch 1] [--prefill]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu import PAGE  # noqa: E402
from bench.gpu_shapes import SHAPES, random_weights  # noqa: E402
from kernels.gpu.device import CupyDevice  # noqa: E402
from services.shard.batch import ForwardBatch  # noqa: E402
from services.shard.gpu_model import GpuShardModel, bucket  # noqa: E402
from services.shard.kv_cache import KVConfig  # noqa: E402
from services.shard.sampling_step import sample_rows  # noqa: E402
from wire.messages.sampling import SamplingParams  # noqa: E402


def _ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1e3:.3f} ms"


def decode_batches(model, batch: int, context: int, n: int):
    pages_each = -(-(context + n + 1) // PAGE)
    table = np.arange(batch * pages_each, dtype=np.int32).reshape(batch, pages_each)
    model.kv.written[:batch * pages_each] = PAGE
    rng = np.random.default_rng(0)
    return [ForwardBatch(positions=np.full(batch, context + i, np.int32), query_lens=np.ones(batch, np.int32),
                         page_table=table, tokens=rng.integers(0, model.config.vocab_size, batch).astype(np.int32))
            for i in range(n)]


def split(model, dev, batches) -> None:
    """The host's, the graph's and the sampler's share of a decode step, each timed alone."""
    cp = dev.xp
    params, hist = [SamplingParams(temperature=0.0)] * batches[0].num_seqs, [np.zeros(0, np.int32)] * batches[0].num_seqs
    whole, replay, gpu, sample = [], [], [], []
    graph = model.graphs[bucket(batches[0].num_tokens)]
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for i, b in enumerate(batches):
        t0 = time.perf_counter()
        logits = model.forward(b, on_device=True)
        t1 = time.perf_counter()
        sample_rows(logits, params, [i] * len(params), hist, sampler=model.sampler)
        t2 = time.perf_counter()
        whole.append(t1 - t0)
        sample.append(t2 - t1)
        t3 = time.perf_counter()
        start.record(dev.stream)
        graph.replay()
        end.record(dev.stream)
        end.synchronize()
        replay.append(time.perf_counter() - t3)
        gpu.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    print(f"forward (stage + replay + wait) {_ms(whole)}; graph replay alone {_ms(replay)} on the host clock, "
          f"{_ms(gpu)} on the GPU's; sampler {_ms(sample)}", flush=True)


def kernels(model, dev, args, prefill) -> None:
    """Each kernel's GPU time over a prefill (when given) and a few decode steps, by name (torch's
    profiler)."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError as e:
        print(f"(no torch profiler: {e})")
        return
    torch.cuda.init()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        if prefill is not None:
            model.kv.written[:] = 0
            model.forward(prefill, on_device=True)
            model.kv.written[:] = 0
        for b in decode_batches(model, args.batch, args.context, 5):
            model.forward(b, on_device=True)
        dev.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="smollm2-135m", help=f"of {', '.join(SHAPES)}")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--prefill", action="store_true", help="profile a prefill of 8 x 512 too")
    args = p.parse_args(argv)
    dev = CupyDevice()
    shape = SHAPES[args.shape]
    pages = max(args.batch * -(-(args.context + 2 * args.steps + 16) // PAGE), 8 * 32) + 8
    model = GpuShardModel(shape.config(), random_weights(shape), KVConfig(pages, PAGE), dev)
    print(f"[{args.shape} b{args.batch}] graph table width {model.width} pages", flush=True)
    split(model, dev, decode_batches(model, args.batch, args.context, args.steps))
    pre = None
    if args.prefill:
        table = np.arange(8 * 32, dtype=np.int32).reshape(8, 32)
        pre = ForwardBatch(positions=np.tile(np.arange(512, dtype=np.int32), 8), query_lens=np.full(8, 512, np.int32),
                           page_table=table, tokens=np.zeros(8 * 512, np.int32))
    kernels(model, dev, args, pre)
    return 0


if __name__ == "__main__":
    sys.exit(main())
