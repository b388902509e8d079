"""Shared fixtures: the real default model, pulled once into the user's cache."""

import os

import pytest

# One BLAS thread per process: tests start several processes on a 2-core machine.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")


@pytest.fixture(scope="session")
def model_path():
    from services.modelstore.pull import pull
    return pull()
