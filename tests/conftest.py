"""Shared fixtures: the real default model, pulled once into the user's cache; `require` for tools."""

import os

import pytest

# One BLAS thread per process: tests start several processes on a 2-core machine.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")


def in_ci() -> bool:
    """True where CI runs the suite (.ci/run with CI=true): there every tool must be present."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require(present: bool, why: str) -> None:
    """Skip the test when a tool it needs is missing here; fail it in CI, where a skip would hide
    that the tool (tmux, the C compiler, the native library) was never installed."""
    if present:
        return
    if in_ci():
        pytest.fail(f"{why} (CI=true: a missing tool fails the run instead of skipping)", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def model_path():
    from services.modelstore.pull import pull
    return pull()
