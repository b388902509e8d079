"""Every GPU test runs twice: on numpy standing in for the device (every host line of the GPU path,
the kernels replaced by their references: this is what CI runs) and, where cupy finds a CUDA
device, on the GPU (the CUDA kernels held to those references)."""

from __future__ import annotations

import pytest

from kernels.gpu.device import CupyDevice, NumpyDevice
from kernels.xp import ArrayModuleUnavailable


def cuda_reason() -> str | None:
    """Why there is no CUDA device here, or None."""
    try:
        CupyDevice()
    except ArrayModuleUnavailable as e:
        return str(e)
    return None


@pytest.fixture(scope="session")
def cuda_device():
    try:
        return CupyDevice()            # one for the session: each source file compiles once
    except ArrayModuleUnavailable as e:
        pytest.skip(f"no CUDA device: {e}")


@pytest.fixture(params=["numpy", pytest.param("cuda", marks=pytest.mark.gpu)])
def dev(request):
    """The device a test runs on: NumpyDevice, or the GPU (skipped without one)."""
    if request.param == "numpy":
        return NumpyDevice()
    return request.getfixturevalue("cuda_device")


# The tiny K-quant GGUFs of every architecture and llama.cpp's logits on them (tests/modelstore).
from tests.modelstore.conftest import arch_reference, built  # noqa: E402,F401
