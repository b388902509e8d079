"""bench/gpu.py and bench/gpu_check.sh stay runnable without a GPU to run them on: the bench's whole
script on the stand-in (its figures mean nothing there), and the check's shell and the test files
it names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_bench_runs_on_the_stand_in_and_prints_its_table_last():
    r = subprocess.run([sys.executable, "bench/gpu.py", "--device", "numpy", "--shapes", "tiny", "--quick",
                        "--context", "32", "--steps", "3"], cwd=ROOT, capture_output=True, text=True, timeout=240,
                       env={"OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("GPU path on"))):]
    assert table[1].startswith("| shape | figure | llmbus | torch CUDA graph |")
    assert [row.split("|")[2].strip() for row in table[3:]] == [
        "weights on the GPU / GGUF bytes", "decode b1", "decode b64", "prefill 8 x 512"]
    assert "| 1.000x |" in table[3]


def test_the_gpu_check_script_parses_and_names_files_that_exist():
    script = ROOT / "bench" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    named = set(re.findall(r"tests/[\w/]+\.py|tests/gpu\b", script.read_text()))
    assert named and all((ROOT / n).exists() for n in named), named
    prepare = ROOT / "bench" / "gpu_prepare.sh"
    assert subprocess.run(["bash", "-n", str(prepare)]).returncode == 0
