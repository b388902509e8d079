"""The engine on a model of the size people run, beside llama.cpp on the same file and threads.

    python3 -m bench.scale [--model FILE | --preset 8b --quant q4_0|q4_k_m|q8_0] [--threads 2]
        [--isa auto|avx2|avx512] [--rounds 3] [--figures single batch8 batch32 prefill128 prefill512]
        [--clock wall|cpu]

Without --model the file is bench/synthetic.py's random-weight model of the preset's shape (made
into the cache on first use): speed does not depend on the weights' values. Each round times every
figure on both engines in turn, the order reversed every other round (ABBA), so a shared machine's
minute-to-minute load hits both alike; each round's line shows both rates, their ratio and the load
average. Figures: single-stream decode (one sequence after a 64-token prompt, best of 3 runs of 16
steps; one run with --clock cpu, whose time no other process's hiccup enters), aggregate decode of a
batch of 8 or 32 sequences (after 16-token prompts, 8 steps); each decode rate is from its run's
median step, on both sides, so one step another process slowed does not move it; and the
prefill of one 128- or 512-token prompt. Beside single-stream, the kernels' pool reads the model's
own weight pages on --threads threads (bench/bandwidth.pool_read_arrays): a token's weight bytes
(all but the token embedding, which a step reads one row of) over that rate is the memory
roofline, and single-stream's share of it is printed per round. The summary gives each figure's
best rate on each side, the ratio of the bests and the median of the rounds' ratios, against the
targets of issue 32. llama.cpp comes from llama-cpp-python where it is importable (PYTHONPATH):
build it for the instruction set compared (--isa) and check its system info line in the header.

--clock cpu (with --threads 1) times each figure by the calling thread's CPU time, on which both
engines compute when they have one thread: on a machine whose cores other processes keep busy the
time spent descheduled is then not counted (the memory system's contention still is), so the
ratios hold where wall-clock figures swing with the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")          # the quantized engine needs no BLAS threads
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import engine_rates, llamacpp_figures as lcf  # noqa: E402
from bench.bandwidth import pool_read_arrays, weight_arrays  # noqa: E402
from bench.synthetic import PRESETS, QUANTS, synthetic_model  # noqa: E402
from kernels import native_lib  # noqa: E402
from kernels.hugepages import advise_hugepages  # noqa: E402
from kernels.qmatmul import ISAS, set_isa  # noqa: E402
from services.modelstore.weight_cache import load_weights  # noqa: E402
from services.shard.kv_cache import KVConfig, PagedKVCache  # noqa: E402
from services.shard.model import ShardModel  # noqa: E402
from services.shard.service import weight_format  # noqa: E402

FIGURES = ("single", "batch8", "batch32", "prefill128", "prefill512")
SINGLE_CONTEXT, SINGLE_STEPS, SINGLE_RUNS = 64, 16, 3
BATCH_CONTEXT, BATCH_STEPS = 16, 8
PAGE = 16
# issue 32's targets: (figure, least ratio to llama.cpp); single-stream also >= 85% of the roofline
TARGETS = {"single": 1.1, "batch8": 1.5, "prefill128": 1.0}
ROOFLINE_TARGET = 0.85


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="a GGUF file (default: the synthetic preset)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="8b", help="synthetic model's shape")
    ap.add_argument("--quant", choices=QUANTS, default="q4_0", help="synthetic model's block kinds")
    ap.add_argument("--threads", type=int, default=2, help="threads of both engines")
    ap.add_argument("--isa", choices=sorted(ISAS), default="auto", help="the native kernels' code path")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--figures", nargs="+", choices=FIGURES, default=list(FIGURES))
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time (needs --threads 1)")
    args = ap.parse_args(argv)
    if args.clock == "cpu" and args.threads != 1:
        ap.error("--clock cpu counts the calling thread's time: it needs --threads 1")
    return args


def runs(clock) -> int:
    """Single-stream runs a figure takes the best of: one when CPU time is counted."""
    return 1 if clock is time.thread_time else SINGLE_RUNS


def batch_of(figure: str) -> int:
    return int(figure.removeprefix("batch"))


def prefill_of(figure: str) -> int:
    return int(figure.removeprefix("prefill"))


class Ours:
    """The engine's side: the model's whole layer range in one ShardModel, its weights as a CPU shard holds them."""

    name = "ours"

    def __init__(self, path: Path, figures, clock):
        self.clock = clock
        loaded = load_weights(path, 0, _n_layers(path), weight_format("cpu", "quantized"))   # after --isa
        self.config, self.weights = loaded.config, loaded.weights
        tokens = [SINGLE_CONTEXT + SINGLE_STEPS + 1] + [prefill_of(f) for f in figures if f.startswith("prefill")]
        tokens += [batch_of(f) * -(-(BATCH_CONTEXT + BATCH_STEPS + 1) // PAGE) * PAGE
                   for f in figures if f.startswith("batch")]
        pages = -(-max(tokens) // PAGE) + 8
        kv = PagedKVCache.for_model(self.config, 0, self.config.n_layers, KVConfig(num_pages=pages, page_size=PAGE))
        self.model = ShardModel(self.config, self.weights, kv)
        engine_rates.decode_rate(self.model, 1, 1, 4)                 # touches every weight page once

    def rate(self, figure: str) -> float:
        c = self.clock
        if figure == "single":
            return max(engine_rates.decode_rate(self.model, 1, SINGLE_STEPS, SINGLE_CONTEXT, c) for _ in range(runs(c)))
        if figure.startswith("batch"):
            return engine_rates.decode_rate(self.model, batch_of(figure), BATCH_STEPS, BATCH_CONTEXT, c)
        return engine_rates.prefill_rate(self.model, prefill_of(figure), runs=1, clock=c)

    def step_bytes(self) -> int:
        """Bytes of weights a decode step reads: all but an untied token embedding (one row of it)."""
        w = self.weights
        embd = w.token_embd.nbytes if w.token_embd is not None and w.token_embd is not w.output else 0
        return w.nbytes() - embd


class Llama:
    """llama.cpp's side, through bench/llamacpp_figures.py's batch API calls."""

    name = "llama.cpp"

    def __init__(self, lc, path: Path, threads: int, clock):
        self.clock = clock
        self.llm = lcf.LlamaCpp(lc, path, threads)
        lcf.decode_rate(self.llm, engine_rates.prompt, 4, 1, 2)      # pages in the weights

    def rate(self, figure: str) -> float:
        p, c = engine_rates.prompt, self.clock
        if figure == "single":
            return max(lcf.decode_rate(self.llm, p, SINGLE_CONTEXT, 1, SINGLE_STEPS, c) for _ in range(runs(c)))
        if figure.startswith("batch"):
            return lcf.decode_rate(self.llm, p, BATCH_CONTEXT, batch_of(figure), BATCH_STEPS, c)
        return lcf.prefill_rate(self.llm, p, prefill_of(figure), runs=1, clock=c)


def _n_layers(path: Path) -> int:
    from services.modelstore.weights import read_config  # noqa: PLC0415
    config, _ = read_config(path)
    engine_rates.TOKEN_IDS[1] = min(engine_rates.TOKEN_IDS[1], config.vocab_size)
    return config.n_layers


def llama_side(path: Path, threads: int, clock) -> tuple[Llama | None, str]:
    try:
        import llama_cpp as lc  # noqa: PLC0415 - optional
    except ImportError:
        return None, "llama_cpp is not importable (put a llama-cpp-python build on PYTHONPATH): ours alone"
    info = lc.llama_print_system_info().decode(errors="replace").strip()
    return Llama(lc, path, threads, clock), f"llama-cpp-python {lc.__version__}: {info}"


def main(argv=None) -> None:
    args = parse(argv)
    native_lib.set_threads(args.threads)
    path_name = set_isa(args.isa)
    advise_hugepages(False)                       # as a shard runs (kernels.hugepages)
    path = args.model or synthetic_model(args.preset, args.quant)
    print(f"model {path.name} ({path.stat().st_size / 1e9:.2f} GB), {args.threads} thread(s) each, "
          f"native path {path_name}{'' if args.isa in ('auto', path_name) else f' ({args.isa} asked)'}, "
          f"{os.cpu_count()} cpus, {args.clock} clock, load average {os.getloadavg()[0]:.2f}", flush=True)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    ours = Ours(path, args.figures, clock)
    llama, about = llama_side(path, args.threads, clock)
    print(about, flush=True)
    arrays, step = weight_arrays(ours.weights), ours.step_bytes()
    sides = [ours] + ([llama] if llama else [])
    rates = {f: {s.name: [] for s in sides} for f in args.figures}
    shares = []
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for figure in args.figures:
            got = {}
            for side in order:
                got[side.name] = side.rate(figure)
                rates[figure][side.name].append(got[side.name])
            line = f"round {r + 1} {figure:<11} ours {got['ours']:7.2f} tok/s"
            if llama:
                line += f", llama.cpp {got['llama.cpp']:7.2f}: {got['ours'] / got['llama.cpp']:.2f}x"
            if figure == "single":
                read = pool_read_arrays(arrays, args.threads, rounds=2, clock=clock)
                roof = read / step
                shares.append(got["ours"] / roof)
                line += f"; pool reads the weights at {read / 1e9:.1f} GB/s: roofline {roof:.2f} tok/s, ours at {shares[-1]:.0%}"
                if llama:
                    line += f", llama.cpp at {got['llama.cpp'] / roof:.0%}"
            print(f"{line}  (load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"\nsummary over {args.rounds} rounds ({step / 1e9:.2f} GB of weights a decode step reads); "
          f"best tok/s, ratio of bests, median of round ratios:")
    for figure in args.figures:
        best = {k: max(v) for k, v in rates[figure].items()}
        line = f"  {figure:<11} ours {best['ours']:7.2f}"
        if llama:
            ratios = [a / b for a, b in zip(rates[figure]["ours"], rates[figure]["llama.cpp"])]
            line += (f"  llama.cpp {best['llama.cpp']:7.2f}  {best['ours'] / best['llama.cpp']:.2f}x"
                     f"  median {statistics.median(ratios):.2f}x")
            if figure in TARGETS:
                line += f"  (target >= {TARGETS[figure]}x: {'met' if statistics.median(ratios) >= TARGETS[figure] else 'not met'})"
        print(line)
    if shares:
        share = statistics.median(shares)
        print(f"  single-stream at {share:.0%} of the roofline (median of rounds; target >= {ROOFLINE_TARGET:.0%}: "
              f"{'met' if share >= ROOFLINE_TARGET else 'not met'})")


if __name__ == "__main__":
    main()
