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


def pytest_collection_modifyitems(config, items):
    """Files with a test marked slow (real processes, the real model) first, each file's tests in
    their own order. `.ci/run` hands whole files to two workers in this order (--dist loadfile,
    --no-loadscope-reorder): the long end-to-end files start early and the run ends on short unit
    files, where xdist's own order (files with the most tests first) left the longest, one- and
    two-test files for last and one worker running them while the other waited."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)       # stable: each file keeps its order


@pytest.fixture(scope="session")
def model_path():
    from services.modelstore.pull import pull
    return pull()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test that used a real `llmbus up` (tests.serve.stack.Stack) shows the stack's
    own output and the end of each service's log: what a hang or an error looked like inside."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    from tests.serve.stack import Stack
    stacks = {id(v): v for v in getattr(item, "funcargs", {}).values() if isinstance(v, Stack)}
    for stack in stacks.values():
        report.sections.append(("llmbus up output", "".join(stack.output[-200:])))
        for log in sorted(stack.runtime.glob("logs/*/*.log")):
            lines = log.read_text(errors="replace").splitlines()[-80:]
            report.sections.append((f"{log.name}, last {len(lines)} lines", "\n".join(lines)))
