"""`llmbus generate` as a person runs it: real shard processes, the real model, text out. Its
shards are keyed as `llmbus up` keys a stack (a key of their own, or $LLMBUS_KEY_FILE's), and a
base model continues the prompt as it is."""

import stat
import subprocess

import pytest

from bus.curve import new_key, write_key_file
from tests.bus.procs import ROOT, cli, env
from tests.waiting import until_sync

pytestmark = pytest.mark.slow


def run(*args: str, timeout: float, **extra_env: str) -> subprocess.CompletedProcess:
    return subprocess.run(cli("generate", *args), cwd=ROOT, env={**env(), **extra_env},
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory, model_path):
    """A base model: a small llama of random weights with the default model's vocabulary and no
    chat template."""
    from bench.synthetic import Shape, tokenizer_fields, write
    fields = {k: v for k, v in tokenizer_fields(model_path).items()
              if not k.startswith("tokenizer.chat_template")}
    return write(tmp_path_factory.mktemp("base") / "base.gguf",
                 Shape(2, 64, 128, 4, 2, tied=True), "q8_0", fields)


def test_generate_answers_through_a_pipeline_of_shard_processes(model_path, tmp_path):
    p = subprocess.Popen(cli("generate", "What is the capital of France? Answer in one sentence.",
                             "--model", str(model_path), "--shards", "3", "--max-tokens", "24",
                             "--temperature", "0"), cwd=ROOT,
                         env={**env(), "LLMBUS_RUNTIME_DIR": str(tmp_path)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Its shards get a key of their own, readable by its user alone, while they run.
        keys = until_sync(lambda: list(tmp_path.glob("local-*.key")) or p.poll() is not None, 120)
        assert keys is not True, "no key was made for the shards"
        assert stat.S_IMODE(keys[0].stat().st_mode) == 0o600
        out, err = p.communicate(timeout=300)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 0, err
    assert "Paris" in out
    assert "3 shards" in err and "tokens/s" in err
    assert not list(tmp_path.glob("*.key"))           # removed as it ended


def test_a_base_model_continues_the_prompt_with_the_key_of_the_environment(base_model, tmp_path):
    # $LLMBUS_KEY_FILE reaches the shards (as --key-file's default): generate must use it too.
    key_file = tmp_path / "cluster.key"
    write_key_file(key_file, new_key())
    r = run("The capital of France is", "--model", str(base_model), "--shards", "1",
            "--max-tokens", "4", timeout=120, LLMBUS_KEY_FILE=str(key_file),
            LLMBUS_RUNTIME_DIR=str(tmp_path))
    assert r.returncode == 0 and "1 shards" in r.stderr and "tokens/s" in r.stderr, r.stderr
    assert not list(tmp_path.glob("local-*.key"))     # no key of its own: it had one


def test_a_system_message_for_a_base_model_is_one_clear_line(base_model):
    r = run("hi", "--model", str(base_model), "--system", "Be brief.", timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [
        "llmbus generate: --system needs a chat template, which this model (a base model) has "
        "none of: write it into the prompt"]


def test_generate_with_more_shards_than_layers_fails_clearly(model_path):
    r = run("hi", "--model", str(model_path), "--shards", "99", timeout=120)
    assert r.returncode == 2 and "cannot cut 30 layers into 99 shards" in r.stderr
    assert "Traceback" not in r.stderr
