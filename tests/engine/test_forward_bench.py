"""bench/forward.py end to end on a small synthetic model. Nothing ran it, and it rotted: it read
the stored bytes as gguf's reader names them (`n_bytes`) after read_config came to return the
engine's own tensor index. Every figure of the quantized engine, the stored bytes and the
roofline are printed; without llama.cpp the run says so."""

import os
import subprocess
import sys
from pathlib import Path

from bench.synthetic import Shape, synthetic_model

SMALL = Shape(n_layers=2, d_model=256, ffn_dim=512, n_heads=4, n_kv_heads=2)
ROOT = Path(__file__).resolve().parents[2]


def test_forward_prints_every_figure_and_the_roofline(tmp_path, model_path):
    path = synthetic_model(SMALL, "q4_0", cache=tmp_path)
    env = {**os.environ, "LLMBUS_CACHE": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "bench/forward.py", "--threads", "1", "--formats", "quantized",
                          "--model", str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    stored = os.path.getsize(path)
    for line in ("single-stream decode", "aggregate decode, batch 32", "prefill 1024 tokens",
                 "roofline for weights as stored", "quantized single-stream is"):
        assert line in out.stdout, out.stdout
    # the tensors' bytes, a little under the file's (its header and vocabulary)
    mib = float(out.stdout.split("stored in GGUF: ")[1].split(" MiB")[0])
    assert 0.5 * stored < mib * 2**20 <= stored
