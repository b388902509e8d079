"""`llmbus generate` as a person runs it: real shard processes, the real model, text out."""

import subprocess

import pytest

from tests.bus.procs import ROOT, cli, env

pytestmark = pytest.mark.slow


def test_generate_answers_through_a_pipeline_of_shard_processes(model_path):
    r = subprocess.run(cli("generate", "What is the capital of France? Answer in one sentence.",
                           "--model", str(model_path), "--shards", "3", "--max-tokens", "24",
                           "--temperature", "0"),
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    assert "3 shards" in r.stderr and "tokens/s" in r.stderr


def test_generate_with_more_shards_than_layers_fails_clearly(model_path):
    r = subprocess.run(cli("generate", "hi", "--model", str(model_path), "--shards", "99"),
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "cannot cut 30 layers into 99 shards" in r.stderr
    assert "Traceback" not in r.stderr
