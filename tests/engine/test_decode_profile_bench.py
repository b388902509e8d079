"""bench/decode_profile.py end to end on a small synthetic model, single-stream and with several
sequences decoding together (`--rows`): the split of a step by op is how an 8-row step's time was
found to be the matmuls' (92% at the 8B shape), so it must keep running."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.synthetic import Shape, synthetic_model
from kernels.native_lib import library_path
from tests.conftest import require

SMALL = Shape(n_layers=2, d_model=256, ffn_dim=512, n_heads=4, n_kv_heads=2)
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("rows", [1, 3])
def test_decode_profile_splits_a_step_by_op(tmp_path, rows):
    native = library_path()
    require(native is not None and native.is_file(), "the native kernels are not built here")
    path = synthetic_model(SMALL, "q4_0", cache=tmp_path)
    env = {**os.environ, "LLMBUS_CACHE": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "bench/decode_profile.py", "--model", str(path), "--rows", str(rows),
                          "--reps", "3", "--rounds", "1", "--context", "20", "--threads", "1"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    head = "single-stream decode" if rows == 1 else f"decode of {rows} sequences together"
    assert out.stdout.startswith(head), out.stdout
    ops = dict(re.findall(r"^(\w+) \((\d+) ops\)", out.stdout, re.M))
    # a llama layer's matmuls: q|k|v fused, o, gate|up fused, down; one attention and swiglu each
    assert ops["qmatmul"] == str(4 * SMALL.n_layers) and ops["attend"] == str(SMALL.n_layers), out.stdout
    assert ops["swiglu"] == str(SMALL.n_layers)
    forward = float(re.search(r"^forward\s+([\d.]+)", out.stdout, re.M).group(1))
    assert forward > 0
