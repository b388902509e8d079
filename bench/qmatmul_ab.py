"""Interleaved A/B of the native quantized matmul: two builds of the library on a GGUF's own layer matrices.

    OPENBLAS_NUM_THREADS=1 python3 bench/qmatmul_ab.py BASELINE.so [CANDIDATE.so] [--model PATH]
        [--threads 1] [--rows 1 16 256] [--rounds 7] [--part layers|head|all] [--isa auto|avx2|avx512|generic]
        [--layers N]
    python3 bench/qmatmul_ab.py --tiles [--model PATH] [...]
    python3 bench/qmatmul_ab.py BASELINE.so [CANDIDATE.so] --tiled [...]

For a kernel change: copy kernels/_native*.so aside (the baseline), change and rebuild, then run this;
CANDIDATE defaults to the library built in kernels/. Both builds are loaded into this one process and
timed in alternating rounds (best of --rounds each), so a shared machine's noise hits both alike.
The matrices are the model's layer tensors as stored (every layer's, so a decode streams them from
memory as a forward does), grouped by kind and shape; x is random. --part head times the output head
instead (output.weight, or the tied token_embd.weight where the file has none), --part all both. Prints per group and row count
the ms of each build, their ratio, the candidate's weight bytes per second, and whether both gave the
same bits; then the whole layer stack's ratio per row count. --isa forces both builds' code path;
--layers N keeps the first N layers' matrices (an 8B model's 32 are 3.9 GB: 8 still stream from memory).
--tiles times one build against itself: A multiplies the Q4_0 matrices in GGUF's order, B the same
matrices in tiles of 16 rows (kernels/q4_0_tiles.py: what a CPU shard multiplies on the AVX-512 path).
--tiled times two builds on those tiles (the Q4_0 matrices only): a change to the tiled kernel.
--clock cpu times this thread's CPU time instead of the wall clock (with --threads 1 the kernel runs on
the calling thread): on a machine whose cores other processes keep busy, time spent descheduled is
then not counted, only what the kernel itself costs.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")              # before numpy: BLAS reads it once
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from gguf import GGUFReader  # noqa: E402

from kernels.native_lib import library_path  # noqa: E402
from kernels.q4_0_tiles import TILED, tile  # noqa: E402
from kernels.qmatmul import ISAS, KIND_CODES  # noqa: E402
from services.modelstore.pull import pull  # noqa: E402
from services.modelstore.quantized import kind_of  # noqa: E402

P, I64, INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int


def load(path: Path, threads: int, isa: str = "auto") -> ctypes.CDLL:
    """One build, with its own thread pool of `threads`, on code path `isa`."""
    lib = ctypes.CDLL(str(path.resolve()))
    lib.lb_qmatmul.restype, lib.lb_qmatmul.argtypes = INT, [INT, P, I64, I64, P, I64, P]
    lib.lb_set_threads.restype, lib.lb_set_threads.argtypes = INT, [INT]
    lib.lb_set_isa.restype, lib.lb_set_isa.argtypes = INT, [INT]
    if lib.lb_set_threads(threads) != threads:
        sys.exit(f"{path}: could not start {threads} threads")
    if isa != "auto" and lib.lb_set_isa(ISAS[isa]) != ISAS[isa]:
        sys.exit(f"{path}: this CPU has no {isa} path")
    return lib


def head_name(tensors) -> str:
    """The output head's tensor: output.weight, or the token embedding a tied model multiplies by."""
    names = {t.name for t in tensors}
    return "output.weight" if "output.weight" in names else "token_embd.weight"


def layer_groups(path: Path, part: str = "layers", layers: int | None = None) -> dict[tuple[str, int, int], list[np.ndarray]]:
    """(kind, rows, cols) -> the blocks (rows, row bytes) of every tensor of `part` of that kind and shape
    (of the first `layers` layers only, when given)."""
    groups = defaultdict(list)
    tensors = GGUFReader(path).tensors
    head = head_name(tensors)
    for t in tensors:
        kind = kind_of(t)
        in_range = t.name.startswith("blk.") and (layers is None or int(t.name.split(".")[1]) < layers)
        wanted = (part != "head" and in_range) or (part != "layers" and t.name == head)
        if wanted and kind is not None and len(t.shape) == 2:
            cols, rows = int(t.shape[0]), int(t.shape[1])
            groups[(kind, rows, cols)].append(np.ascontiguousarray(t.data).reshape(rows, -1))
    return dict(sorted(groups.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("baseline", type=Path, nargs="?", default=None, help="default with --tiles: the build in kernels/")
    ap.add_argument("candidate", type=Path, nargs="?", default=None, help="default: the build in kernels/")
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the pulled default model)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 16, 256], help="rows of x (T)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--part", choices=("layers", "head", "all"), default="layers",
                    help="the layer tensors, the output head, or both")
    ap.add_argument("--isa", choices=sorted(ISAS), default="auto", help="both builds' code path")
    ap.add_argument("--layers", type=int, default=None, help="only the first N layers' matrices")
    ap.add_argument("--tiles", action="store_true", help="one build: Q4_0 in GGUF's order (A) against in tiles (B)")
    ap.add_argument("--tiled", action="store_true", help="two builds, both on Q4_0 in tiles")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: this thread's CPU time (with --threads 1 only)")
    args = ap.parse_args()
    if args.tiles:
        args.baseline = args.candidate = args.baseline or library_path()
    candidate = args.candidate or library_path()
    if candidate is None or args.baseline is None:
        sys.exit("no candidate: build the library (pip install -e .) or name one")
    if args.clock == "cpu" and args.threads != 1:
        sys.exit("--clock cpu counts the calling thread's time: it needs --threads 1")
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    if args.baseline.resolve() == Path(candidate).resolve() and not args.tiles:
        sys.exit("the baseline is the candidate: copy the built library aside before rebuilding")
    libs = [load(args.baseline, args.threads, args.isa)]
    libs.append(libs[0] if args.tiles else load(Path(candidate), args.threads, args.isa))
    groups = layer_groups(args.model or pull(), args.part, args.layers)
    if args.tiles or args.tiled:
        groups = {g: mats for g, mats in groups.items() if g[0] == "q4_0"}
        tiled = {g: [tile(m) for m in mats] for g, mats in groups.items()}
    rng = np.random.default_rng(0)
    print(f"A = {args.baseline}, B = {candidate}, {args.threads} thread(s), path {args.isa}, {args.clock} clock, best of {args.rounds} "
          f"interleaved rounds, load average {os.getloadavg()[0]:.2f}")
    print(f"{'kind':<6} {'rows x cols':>12} {'T':>5} {'A ms':>9} {'B ms':>9} {'A/B':>6} {'B GB/s':>7}  same bits")
    for t in args.rows:
        total = [0.0, 0.0]
        for (kind, rows, cols), mats in groups.items():
            x = rng.standard_normal((t, cols)).astype(np.float32)
            outs = [np.empty((len(mats), t, rows), np.float32) for _ in libs]

            if args.tiled:
                ws, codes = [tiled[(kind, rows, cols)]] * 2, [KIND_CODES[TILED]] * 2
            else:
                ws = [mats, tiled[(kind, rows, cols)] if args.tiles else mats]
                codes = [KIND_CODES[kind], KIND_CODES[TILED if args.tiles else kind]]

            def run(i):
                for m, o in zip(ws[i], outs[i]):
                    rc = libs[i].lb_qmatmul(codes[i], x.ctypes.data, t, cols, m.ctypes.data, rows, o.ctypes.data)
                    if rc:
                        sys.exit(f"lb_qmatmul refused {kind} ({rows}, {cols}) T={t}: code {rc}")
            best = [float("inf")] * 2
            for _ in range(args.rounds):
                for i in (0, 1):
                    start = clock()
                    run(i)
                    best[i] = min(best[i], clock() - start)
            total = [total[0] + best[0], total[1] + best[1]]
            same = "yes" if np.array_equal(outs[0], outs[1], equal_nan=True) else "no"
            gbs = sum(m.nbytes for m in mats) / best[1] / 1e9
            print(f"{kind:<6} {f'{rows}x{cols}':>12} {t:>5} {best[0] * 1e3:9.3f} {best[1] * 1e3:9.3f} "
                  f"{best[0] / best[1]:5.2f}x {gbs:7.1f}  {same} ({len(mats)} layers)")
        print(f"{'all ' + args.part:<19} {t:>5} {total[0] * 1e3:9.3f} {total[1] * 1e3:9.3f} {total[0] / total[1]:5.2f}x")


if __name__ == "__main__":
    main()
