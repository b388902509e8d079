"""kernels.hugepages: with the advice off, a large array's memory comes in small pages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

# A fresh process (the setting is the process's): a 64 MiB array, written through, then the huge
# pages its mapping holds, from /proc/self/smaps.
PROBE = """
import sys
import numpy as np
from kernels.hugepages import advise_hugepages
advise_hugepages(sys.argv[1] == "on")
a = np.empty(64 << 20, np.uint8)
a[:] = 1
addr = a.ctypes.data + a.nbytes // 2   # numpy advises from the next page boundary on
inside = False
for line in open("/proc/self/smaps"):
    head = line.split()[0]
    if "-" in head and ":" not in head:
        lo, hi = (int(x, 16) for x in head.split("-"))
        inside = lo <= addr < hi
    elif inside and head == "AnonHugePages:":
        print(int(line.split()[1]))
        break
"""


def huge_kib(setting: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, setting], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux's /proc/self/smaps")
def test_with_the_advice_off_a_large_array_gets_no_huge_pages():
    if huge_kib("on") == 0:
        pytest.skip("this machine gives numpy's large arrays no transparent huge pages "
                    "(THP off, or none free): nothing to tell apart")
    assert huge_kib("off") == 0


def test_the_setting_returns_the_previous_one():
    from kernels.hugepages import advise_hugepages
    before = advise_hugepages(False)
    try:
        assert advise_hugepages(False) in (False, None)
    finally:
        if before is not None:
            advise_hugepages(before)
