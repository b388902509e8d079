"""LLMBUS_ISA: a process's kernels on the code path it names, in a process of its own (the path is
chosen when the library loads); a name that is no path is refused with the names that are."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels import native_lib
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
PROBE = ("from kernels.native_lib import load, ISAS; from kernels.q4_0_tiles import wants_tiles; "
         "lib = load(); got = int(lib.lb_isa()); "
         "print(next(k for k, v in ISAS.items() if v == got), wants_tiles(lib))")


def run(isa: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LLMBUS_ISA"}
    if isa is not None:
        env["LLMBUS_ISA"] = isa
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def best() -> str:
    got = run(None)
    assert got.returncode == 0, got.stderr
    return got.stdout.split()[0]


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
def test_the_kernels_take_the_path_llmbus_isa_names(isa):
    require(native_lib.load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    order = list(native_lib.ISAS)
    top = best()
    if order.index(isa) > order.index(top):
        pytest.skip(f"this CPU's best path is {top}, below {isa}")
    got = run(isa)
    assert got.returncode == 0, got.stderr
    # tiles where an x86 vector path multiplies: a shard forced to plain C keeps GGUF's order
    assert got.stdout.split() == [isa, str(isa != "generic")]


def test_a_path_the_cpu_lacks_gives_its_best_and_auto_gives_the_best():
    require(native_lib.load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    top = best()
    got = run("auto")
    assert got.returncode == 0 and got.stdout.split()[0] == top
    if top != "avx512":
        got = run("avx512")
        assert got.returncode == 0 and got.stdout.split()[0] == top


def test_a_name_that_is_no_path_is_refused_with_the_names_that_are():
    got = run("avx9000")
    assert got.returncode != 0
    assert "LLMBUS_ISA='avx9000' is not a code path: one of auto, generic, avx2, avx512" in got.stderr
