"""`require`: a missing tool skips a test on a developer's machine and fails it in CI."""

import pytest

from tests.conftest import require


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_a_missing_tool_fails_in_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="tmux is not installed"):
        require(False, "tmux is not installed")


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_a_missing_tool_skips_elsewhere(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="no C compiler"):
        require(False, "no C compiler")


def test_a_present_tool_runs_the_test_in_ci_too(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert require(True, "unused") is None
