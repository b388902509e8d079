"""Quantized matmul benchmark: native Q4_1 / Q8_0 kernels against float32 BLAS on the dequantized weights.

The native kernels round x to 8 bits per block first, as llama.cpp does (kernels.qact), and sum
in integers; BLAS multiplies the float32 x. So this compares speed, not identical results.

    OPENBLAS_NUM_THREADS=1 python3 bench/qmatmul.py [--passes 5]

One pass = 30 layers of SmolLM2-135M's projections (qkv 960x576, attn_output 576x576, gate+up
3072x576, down 576x1536), each layer a different matrix so weights stream from memory as in a decode
step; then the tied 49152x576 Q8_0 head. Prints ms per pass (best of --passes) for T rows of x:
native, `w @ x.T` on float32, and kernels.matmul's split small-matrix BLAS path (the engine's),
with the ratio of the faster BLAS to native.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")              # before numpy: BLAS reads it once
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from kernels.matmul import matmul  # noqa: E402
from kernels.qmatmul import available, qmatmul  # noqa: E402
from kernels.qmatrix import QUANT_KINDS, QMatrix  # noqa: E402

LAYER_SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))   # (out, in) per layer
N_LAYERS = 30
HEAD = (49152, 576)
TS = (1, 4, 8, 16, 32)


def random_qmatrix(rng, kind: str, rows: int, cols: int) -> QMatrix:
    """Random quants with weight-like float16 scales (d ~ 0.01, Q4_1 minimum ~ -8 d)."""
    bb = QUANT_KINDS[kind][1]
    nb = rows * cols // 32
    data = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    d = np.abs(rng.normal(0.01, 0.003, nb)).astype(np.float16)
    data[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    if kind == "q4_1":
        data[:, 2:4] = (-8 * d).astype(np.float16).view(np.uint8).reshape(nb, 2)
    return QMatrix(kind, data.reshape(rows, cols // 32 * bb), cols)


def best_ms(fns, passes: int) -> list[float]:
    """Best ms of each function, timed in interleaved rounds so a noisy neighbour hits all alike."""
    best = [float("inf")] * len(fns)
    for fn in fns:
        fn()
    for _ in range(passes):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return [b * 1e3 for b in best]


def row(label: str, q_ms: float, f_ms: float, s_ms: float) -> str:
    return f"{label:<10} {q_ms:9.2f} {f_ms:11.2f} {s_ms:11.2f} {min(f_ms, s_ms) / q_ms:8.2f}x"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=5)
    args = ap.parse_args()
    if not available():
        sys.exit("the native library is not built: run `python3 -m pip install -e .` first")
    rng = np.random.default_rng(0)
    layers = [[random_qmatrix(rng, "q4_1", n, k) for n, k in LAYER_SHAPES] for _ in range(N_LAYERS)]
    layers_f = [[w.dequantize() for w in ws] for ws in layers]
    head = random_qmatrix(rng, "q8_0", *HEAD)
    head_f = head.dequantize()
    q_mb = sum(w.nbytes for ws in layers for w in ws) / 1e6
    f_mb = sum(w.nbytes for ws in layers_f for w in ws) / 1e6
    print(f"30 layers: {q_mb:.1f} MB as Q4_1, {f_mb:.1f} MB as float32; head: {head.nbytes / 1e6:.1f} MB Q8_0, "
          f"{head_f.nbytes / 1e6:.1f} MB float32")
    print(f"{'':<10} {'native ms':>9} {'f32 w@x.T':>11} {'f32 split':>11} {'speedup':>9}")
    for t in TS:
        xs = {k: rng.standard_normal((t, k)).astype(np.float32) for k in (576, 1536)}

        def native():
            for ws in layers:
                for w in ws:
                    qmatmul(xs[w.cols], w)

        def blas():
            for ws in layers_f:
                for w in ws:
                    w @ xs[w.shape[1]].T

        def split():
            for ws in layers_f:
                for w in ws:
                    matmul(np, xs[w.shape[1]], w, split=True)

        print(row(f"layers T={t}", *best_ms([native, blas, split], args.passes)))
    for t in TS:
        x = rng.standard_normal((t, HEAD[1])).astype(np.float32)
        print(row(f"head T={t}", *best_ms([lambda: qmatmul(x, head), lambda: head_f @ x.T,
                                           lambda: matmul(np, x, head_f, split=True)], args.passes)))


if __name__ == "__main__":
    main()
