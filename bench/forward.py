"""Forward-pass benchmark of the numpy engine (and llama.cpp beside it when llama_cpp is importable).

    python3 bench/forward.py [--threads 1] [--model PATH] [--isa avx2|avx512|auto] [--formats quantized]

Prints, for each weight format a CPU shard can hold (GGUF's quantized blocks through the
native kernel, and dequantized float32 through OpenBLAS), single-stream decode tokens/s (best of
3 runs, llama.cpp's too: the machine is shared), aggregate decode tokens/s at batch 1..32, prefill tokens/s at 256 and 1024 tokens and resident
memory of the weights; the memory-bandwidth roofline for the weights as stored in the GGUF and
single-stream decode's share of it; and llama.cpp's figures with our ratio to them. With
--threads N > 1 it also times single-stream decode on 1 and N threads in alternating rounds, and
holds each against what the kernels' pool reads on 1 and N threads (bench/bandwidth.py,
lb_pool_read) from the model's own weight pages, read just before each decode, and against the most
N threads can gain on that memory: a token's stored bytes at the N-thread read bandwidth, over one
thread's measured time (a VM whose threads share little more than one thread's bandwidth caps it;
on a shared VM both change by the minute, so each round is printed). --isa forces the
native kernels' code path (quantized matmul and attention; `lb_set_isa`), and the header names it
beside the llama.cpp build's own system info, so a comparison is read for one instruction set
(bench/llamacpp_figures.py; install with `pip install .[bench]`). On a CPU whose CPUID shows AMX
but whose VM does not allow it, a native llama.cpp build dies with SIGILL (tileloadd): build it
with CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
-DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF" (plus AVX/AVX2/FMA/F16C/BMI2 ON).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

BATCHES = (1, 4, 8, 16, 32)
FORMATS = ("quantized", "float32")     # the first is what a CPU shard runs by default
PREFILLS = (256, 1024)
CONTEXT = 64          # tokens already in each sequence's cache before decode is timed


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1,
                    help="threads of each side: the native kernels' pool, BLAS for numpy (float32), llama.cpp's")
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the pulled default model)")
    ap.add_argument("--steps", type=int, default=16, help="decode steps timed per figure")
    ap.add_argument("--cold", action="store_true", help="load weights into a fresh temporary cache (cold load)")
    ap.add_argument("--isa", choices=("auto", "avx2", "avx512", "generic"), default="auto",
                    help="the native kernels' code path (default: the widest this CPU has)")
    ap.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS),
                    help="weight formats to run (float32 doubles the run's length)")
    return ap.parse_args()


args = parse()
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)   # before numpy is imported: BLAS reads it once
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from services.modelstore.pull import pull  # noqa: E402
from services.modelstore.weight_cache import load_weights  # noqa: E402
from services.modelstore.weights import read_config  # noqa: E402
from services.shard.service import weight_format  # noqa: E402
from services.shard.kv_cache import KVConfig, PagedKVCache  # noqa: E402
from services.shard.model import ShardModel  # noqa: E402
from bench.bandwidth import (  # noqa: E402
    pool_read_arrays, pool_read_bandwidth, read_bandwidth, read_bandwidth_together, weight_arrays)
from bench import engine_rates  # noqa: E402
from bench.engine_rates import TOKEN_IDS, prefill_rate, prompt  # noqa: E402
from bench.llamacpp_figures import SINGLE_ROUNDS, figures as llama_cpp_figures  # noqa: E402
from kernels.qmatmul import available as qmatmul_available, set_isa  # noqa: E402
from kernels import native_lib  # noqa: E402
from kernels.hugepages import advise_hugepages  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def decode_rate(model: ShardModel, batch: int, steps: int) -> float:
    return engine_rates.decode_rate(model, batch, steps, CONTEXT)


def ours(path: Path, n_layers: int, steps: int, root: Path | None, fmt: str) -> dict:
    rss0 = rss_bytes()
    t = time.perf_counter()
    loaded = load_weights(path, 0, n_layers, weight_format("cpu", fmt), root=root)    # as a CPU shard loads it
    load_s = time.perf_counter() - t
    cfg = loaded.config
    kv = PagedKVCache.for_model(cfg, 0, cfg.n_layers, KVConfig(num_pages=512, page_size=16))
    model = ShardModel(cfg, loaded.weights, kv)
    res = {"load_s": load_s, "cold": loaded.cold}
    t = time.perf_counter()
    decode_rate(model, 1, 1)                                   # touches every weight page once
    res["first_forward_s"] = time.perf_counter() - t
    res["rss_weights"] = rss_bytes() - rss0 - kv.nbytes()
    res["weights_bytes"] = loaded.weights.nbytes()
    res["single"] = max(decode_rate(model, 1, steps * 2) for _ in range(SINGLE_ROUNDS))
    if args.threads > 1:               # the same decode on one thread, rounds interleaved: the pool's gain
        arrays = weight_arrays(loaded.weights)
        res["rounds"] = []             # per round: the weights read on 1 and N threads, decode on 1 and N
        for _ in range(SINGLE_ROUNDS):
            read1 = pool_read_arrays(arrays, 1, rounds=2)
            native_lib.set_threads(1)
            one = decode_rate(model, 1, steps * 2)
            read_n = pool_read_arrays(arrays, args.threads, rounds=2)
            native_lib.set_threads(args.threads)
            res["rounds"].append((read1, one, read_n, decode_rate(model, 1, steps * 2)))
        res["single_1thread"] = max(r[1] for r in res["rounds"])
        res["single_nthreads"] = max(r[3] for r in res["rounds"])
    res["batch"] = {b: decode_rate(model, b, steps) for b in BATCHES}
    res["prefill"] = {n: prefill_rate(model, n) for n in PREFILLS}
    return res


def pool_dispatch_us(calls: int = 20000) -> float:
    """Microseconds of one empty parallel_for over 4 tasks a thread (the pool's cost per kernel call)."""
    lib = native_lib.load()
    if lib is None or native_lib.threads() < 2:
        return 0.0
    lib.lb_pool_noop(1000, 4 * native_lib.threads())
    t = time.perf_counter()
    lib.lb_pool_noop(calls, 4 * native_lib.threads())
    return (time.perf_counter() - t) / calls * 1e6


POOL = "the kernels' pool reads"


def thread_reads(bw: dict) -> tuple[dict, str]:
    """Bytes/s read from memory on 1 and --threads threads, and how they were read: by the kernels'
    own pool (bench.bandwidth.pool_read_bandwidth), or without the library by BLAS gemvs (the
    N-thread figure from N processes at once)."""
    pool = {n: pool_read_bandwidth(n) for n in sorted({1, args.threads})}
    if pool[1] is not None:
        return pool, POOL
    reads = {1: bw["gemv"]}
    if args.threads > 1:
        reads[args.threads] = read_bandwidth_together(args.threads)
    return reads, "BLAS gemvs read"


def native_path() -> str:
    """Force the requested code path; say which one runs (a wider one than the CPU has falls back)."""
    if not qmatmul_available():
        return "none (native library not built)"
    got = set_isa(args.isa)
    return got + ("" if got == args.isa or args.isa == "auto" else f" ({args.isa} asked: this CPU lacks it)")


def llama_cpp_build() -> str:
    """llama.cpp's system info string (the instruction sets its build uses), or '-'."""
    try:
        import llama_cpp  # noqa: PLC0415 - optional
        return llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    except Exception:  # noqa: BLE001 - a bench reports, it does not crash
        return "-"


def main() -> None:
    global FORMATS
    FORMATS = tuple(f for f in FORMATS if f in args.formats)
    path_name = native_path()
    native_lib.set_threads(args.threads)
    advise_hugepages(False)            # as a shard runs (kernels.hugepages)
    load_start = os.getloadavg()
    path = args.model or pull()
    config, reader = read_config(path)
    TOKEN_IDS[1] = min(TOKEN_IDS[1], config.vocab_size)
    stored = sum(int(t.data.nbytes) for t in reader.tensors)
    bw = read_bandwidth()
    reads, how = thread_reads(bw)
    runs = {}
    for fmt in FORMATS:
        with tempfile.TemporaryDirectory() as tmp:
            runs[fmt] = ours(path, config.n_layers, args.steps, Path(tmp) if args.cold else None, fmt)
    r = runs[FORMATS[0]]
    load_before = os.getloadavg()
    ref = llama_cpp_figures(path, prompt, context=CONTEXT, steps=args.steps, threads=args.threads,
                            batches=BATCHES, prefills=PREFILLS)
    # The fastest read seen on this run's thread count: numpy's (BLAS on --threads threads) or the pool's.
    best_bw = max([*bw.values(), reads[args.threads] if how == POOL else 0.0])
    roof = best_bw / stored

    def line(name, key, unit, pick):
        vals = [pick(runs[f]) for f in FORMATS]
        cells = "".join(f"{v:11.1f}" for v in vals)
        if isinstance(ref, dict) and ref.get(key):
            cells += f"{ref[key]:11.1f}" + "".join(f"{v / ref[key]:9.2f}x" for v in vals)
        print(f"{name:<28}{cells}   {unit}")

    print(f"model {path.name}, {args.threads} thread(s), numpy {np.__version__}, native kernel "
          f"{'built' if qmatmul_available() else 'NOT built (quantized runs the numpy fallback)'}, "
          f"llama-cpp-python {ref['version'] if isinstance(ref, dict) else '-'}, {os.cpu_count()} cpus, "
          f"1-min load average {load_start[0]:.2f} at start, {load_before[0]:.2f} before llama.cpp, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(f"native code path: {path_name}; llama.cpp build: {llama_cpp_build()}")
    print(f"native kernel threads: {native_lib.threads()}" + (
        f", pool dispatch {pool_dispatch_us():.2f} us per parallel_for (empty, {4 * native_lib.threads()} tasks)"
        if native_lib.threads() > 1 else ""))
    for f in FORMATS:
        x = runs[f]
        print(f"{f}: weights load ({'cold: read GGUF + write cache' if x['cold'] else 'warm: mmap'}) "
              f"{x['load_s']:.3f} s, first forward {x['first_forward_s']:.3f} s, weights "
              f"{x['weights_bytes'] / 2**20:.0f} MiB, RSS growth {x['rss_weights'] / 2**20:.0f} MiB")
    head = "".join(f"{f:>11}" for f in FORMATS)
    if isinstance(ref, dict):
        head += f"{'llama.cpp':>11}" + "".join(f"{'ratio ' + f[:5]:>10}" for f in FORMATS)
    print(f"{'':<28}{head}")
    line("single-stream decode", "single", "tok/s", lambda x: x["single"])
    for b in BATCHES:
        line(f"aggregate decode, batch {b}", f"batch{b}", "tok/s", lambda x, b=b: x["batch"][b])
    for n in PREFILLS:
        line(f"prefill {n} tokens", f"prefill{n}", "tok/s", lambda x, n=n: x["prefill"][n])
    print(f"stored in GGUF: {stored / 2**20:.1f} MiB")
    print("read bandwidth: " + ", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in bw.items())
          + (f"; {how} " + ", ".join(f"{v / 1e9:.1f} GB/s on {n} thread(s)" for n, v in reads.items())
             if how == POOL or args.threads > 1 else ""))
    print(f"roofline for weights as stored: {roof:.1f} tok/s ({best_bw / 1e9:.1f} GB/s / {stored / 1e6:.1f} MB); "
          + ", ".join(f"{f} single-stream is {runs[f]['single'] / roof:.0%} of it" for f in FORMATS))
    if "float32" in runs:
        fl = runs["float32"]
        print(f"roofline for float32 weights: {best_bw / fl['weights_bytes']:.1f} tok/s; "
              f"float32 single-stream is {fl['single'] / (best_bw / fl['weights_bytes']):.0%} of it")
    p256, p1024 = r["prefill"][PREFILLS[0]], r["prefill"][PREFILLS[-1]]
    print(f"prefill {PREFILLS[-1]} runs at {p1024 / p256:.0%} of prefill {PREFILLS[0]}'s tokens/s ({FORMATS[0]}; "
          f"target >= 75%)" + (f", llama.cpp at {ref[f'prefill{PREFILLS[-1]}'] / ref[f'prefill{PREFILLS[0]}']:.0%}"
                               if isinstance(ref, dict) else ""))
    busiest = max(load_start[0], load_before[0], os.getloadavg()[0])
    if busiest > (os.cpu_count() or 1) + 0.25:          # our own threads count in it too
        print(f"warning: load average reached {busiest:.2f} on {os.cpu_count()} cpus: other processes "
              f"competed with these {args.threads} thread(s); spinning thread pools (OpenBLAS, llama.cpp's "
              "OpenMP) can collapse when oversubscribed, so treat these figures as noisy")
    if "single_1thread" in r:
        gain = r["single_nthreads"] / r["single_1thread"]
        print(f"single-stream decode ({FORMATS[0]}), rounds interleaved: {r['single_1thread']:.1f} tok/s on 1 thread, "
              f"{r['single_nthreads']:.1f} on {args.threads}: {gain:.2f}x (target on 2 free cores: 2 threads >= 1.7x; "
              f"{'met' if gain >= 1.7 else 'not met'})")
        own = r["rounds"][0][0] is not None
        if own:                        # the weights' own pages, at their fastest in these rounds
            reads = {1: max(x[0] for x in r["rounds"]), args.threads: max(x[2] for x in r["rounds"])}
            how = "the kernels' pool reads the model's weight pages"
        for n, rate in ((1, r["single_1thread"]), (args.threads, r["single_nthreads"])):
            print(f"  on {n} thread(s) a token streams the stored weights at {rate * stored / 1e9:.1f} GB/s: "
                  f"{rate * stored / reads[n]:.0%} of what {how} on {n} thread(s) ({reads[n] / 1e9:.1f} GB/s)")
        ceiling = reads[args.threads] / stored / r["single_1thread"]
        print(f"  the most {args.threads} threads can gain here: {ceiling:.2f}x (every byte of a token streamed at "
              f"what {how} on {args.threads} threads, nothing else on the clock); "
              f"{args.threads} threads measured {gain / ceiling:.0%} of that gain")
        if own:
            n = args.threads
            print("  each round, the pool reading the model's own weight pages just before each decode (a VM's "
                  "memory and the placement of its threads change by the minute):")
            for read1, one, read_n, many in r["rounds"]:
                print(f"    weights read {read1 / 1e9:.1f} GB/s on 1 thread, {read_n / 1e9:.1f} on {n}; decode "
                      f"{one:.1f} tok/s on 1, {many:.1f} on {n}: {many / one:.2f}x, of at most "
                      f"{read_n / stored / one:.2f}x ({many * stored / read_n:.0%})")
    if isinstance(ref, str):
        print(ref)
    else:
        b16 = r["batch"][16] / ref["batch16"]
        one = r["single"] / ref["single"]
        pre = r["prefill"][PREFILLS[-1]] / ref[f"prefill{PREFILLS[-1]}"]
        met = lambda ok: "met" if ok else "not met"   # noqa: E731
        print(f"targets ({FORMATS[0]}, path {path_name}): single-stream decode >= 1.2x llama.cpp: {one:.2f}x "
              f"({met(one >= 1.2)}); aggregate decode at batch 16 >= 1.5x: {b16:.2f}x ({met(b16 >= 1.5)}); "
              f"prefill {PREFILLS[-1]} >= 1.0x: {pre:.2f}x ({met(pre >= 1.0)}); single-stream >= 80% of the "
              f"stored-weight roofline: {r['single'] / roof:.0%} ({met(r['single'] >= 0.8 * roof)}); "
              f"llama.cpp single-stream is {ref['single'] / roof:.0%} of it")


if __name__ == "__main__":
    main()
