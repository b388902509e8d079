"""Per-batch sampling time over the real vocabulary (49152), greedy vs temperature/top-p.

Run from the repository root: OPENBLAS_NUM_THREADS=1 python3 -m bench.sampling [--repeat N]
"""

import argparse
import time

import numpy as np

from kernels.sampling import sample
from wire.messages.sampling import SamplingParams

V = 49152
CASES = {
    "greedy": SamplingParams(temperature=0),
    "greedy+top5": SamplingParams(temperature=0, top_logprobs=5),
    "temp0.8": SamplingParams(temperature=0.8, seed=1),
    "temp0.8+top_p0.95": SamplingParams(temperature=0.8, top_p=0.95, seed=1),
    "top_k40+top_p0.9": SamplingParams(top_k=40, top_p=0.9, seed=1),
    "min_p0.05": SamplingParams(temperature=0.8, min_p=0.05, seed=1),
    "top_p0.95+penalties": SamplingParams(temperature=0.8, top_p=0.95, repetition_penalty=1.1,
                                          presence_penalty=0.5, frequency_penalty=0.5, seed=1),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"vocab {V}, best of {args.repeat} runs (the machine is shared), ms per batch")
    print(f"{'case':24s}" + "".join(f"{'B=' + str(b):>10s}" for b in (1, 16, 64)))
    for name, p in CASES.items():
        row = f"{name:24s}"
        for B in (1, 16, 64):
            # Model-like logits: a peaked head over a long tail.
            logits = (rng.standard_normal((B, V)) * 2.5).astype(np.float32)
            hist = [rng.integers(0, V, 512) for _ in range(B)]
            steps = [256] * B
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                sample(logits, [p] * B, hist, steps)
                times.append(time.perf_counter() - t0)
            row += f"{min(times) * 1e3:10.2f}"
        print(row)


if __name__ == "__main__":
    main()
