"""Fixtures of the kernel tests."""

import pytest

from kernels import qmatmul as qm
from tests.conftest import require


@pytest.fixture(params=("generic", "avx2", "avx512"))
def isa(request):
    """Each native code path in turn, forced (skipped where the CPU lacks it); back to auto after."""
    require(qm.available(), "the native library is not built (pip install -e . with a C compiler builds it)")
    got = qm.set_isa(request.param)
    if got != request.param:
        pytest.skip(f"this CPU lacks {request.param}")
    yield got
    qm.set_isa("auto")
