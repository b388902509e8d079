"""The AVX-512 path checked on a CPU without AVX-512: the library is built again with its AVX-512
intrinsics defined by SIMDe in portable C (kernels/native/simde_avx512.h, Debian's libsimde-dev),
and every kernel test of that path runs against the build in a child pytest. Its speed needs the
hardware; its bits do not."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernels import qmatmul as qm
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
SIMDE = Path("/usr/include/simde/x86/avx512.h")

pytestmark = pytest.mark.slow      # a compiler and a child pytest: over a minute on 2 cores


@pytest.fixture(scope="module")
def emulated_library(tmp_path_factory) -> Path:
    require(shutil.which("cc") is not None, "no C compiler")
    require(SIMDE.exists(), "SIMDe is not installed (apt-get install libsimde-dev)")
    require(qm.available(), "the native library is not built (pip install -e . with a C compiler builds it)")
    if os.environ.get("LLMBUS_NATIVE_LIB"):
        pytest.skip("already running against another build of the library")
    if qm.set_isa("avx2") != "avx2":              # the emulated path runs beside native AVX2 code
        qm.set_isa("auto")
        pytest.skip("this CPU lacks AVX2")
    qm.set_isa("auto")
    out = tmp_path_factory.mktemp("emulated")
    # setup.py's own build, flags and sources, with the test build's define added (CFLAGS), and
    # without Python's default -g: debug information for SIMDe's thousands of inlined intrinsics was
    # half of the build's time, and -g never changes the code GCC generates.
    env = dict(os.environ, CFLAGS="-DLB_SIMDE_AVX512 -w -g0")
    run = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--parallel", "2",
                          "--build-temp", str(out / "tmp"), "--build-lib", str(out / "lib")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    built = sorted((out / "lib" / "kernels").glob("_native*.so"))
    assert run.returncode == 0 and built, run.stdout[-3000:] + run.stderr[-3000:]
    return built[0]


def test_every_avx512_kernel_test_passes_on_the_emulated_path(emulated_library):
    env = dict(os.environ, LLMBUS_NATIVE_LIB=str(emulated_library))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                          "tests/kernels", "-k", "avx512 and not emulated"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = run.stdout[-4000:]
    assert run.returncode == 0, tail
    passed = re.search(r"(\d+) passed", tail)
    assert passed and int(passed.group(1)) >= 30, tail       # the path really ran: none skipped for want of it
    assert "lacks avx512" not in tail, tail
