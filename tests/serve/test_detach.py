"""`llmbus up --detach` returns once the stack serves; `llmbus down` stops it and its children."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from wire.messages.bus import Status
from wire.messages.scheduler import Generate

from ..bus.procs import ROOT, cli, env
from .stack import call, generate, remember_key

pytestmark = pytest.mark.slow


def run(runtime, *args, timeout=300):
    e = env()
    e["LLMBUS_RUNTIME_DIR"] = str(runtime)
    return subprocess.run(cli(*args), cwd=ROOT, env=e, capture_output=True, text=True,
                          timeout=timeout)


async def test_detached_stack_serves_until_down(tmp_path, model_path):
    up = run(tmp_path, "up", "--detach", "--shards", "1", "--http", "127.0.0.1:0",
             "--model", str(model_path))
    assert up.returncode == 0, up.stderr
    assert "llmbus down" in up.stdout
    (file,) = tmp_path.glob("*.json")
    info = json.loads(file.read_text())
    assert f"HTTP API at {info['http']}" in up.stdout and info["http"].startswith("http://")
    # ... and how to inspect it, having shown each service coming up while it waited.
    assert "inspect it with `busctl list`" in up.stdout
    for name in ("tokenizer-0", "shard-0", "scheduler-0", "gateway-0"):
        assert re.search(rf"^\[llmbus up\] {name}: ready \([\d.]+s\)$", up.stderr, re.M), up.stderr
    remember_key(info)                    # the stack's own key: its services answer members only
    try:
        res = await generate("tcp://" + info["scheduler"], Generate(
            messages=[{"role": "user", "content": "What is the capital of Japan?"}],
            temperature=0.0, max_tokens=20))
        assert "Tokyo" in res.text
        pids = [(await call(f"tcp://{p}", Status())).info["pid"] for p in info["peers"]]
    finally:
        down = run(tmp_path, "down", timeout=90)
    assert down.returncode == 0, down.stderr
    assert f"stopped {info['cluster']}" in down.stdout
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.key"))
    for pid in [info["pid"], *pids]:
        assert not os.path.exists(f"/proc/{pid}") or \
            open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z", pid
    again = run(tmp_path, "down")
    assert again.returncode == 1 and "no llmbus stack is running" in again.stderr
