"""A default `llmbus up` (no key given) is keyed: it makes a CURVE key of its own (mode 0600,
beside its stack file) that every process of the stack uses, and `busctl` and `llmbus chat` find
the stack and its key through that file, with no flags and with --cluster. Another user's
process (no access to the runtime folder, so no key) gets no answer from any service, and six
`busctl kill` calls of its own leave the tokenizer alone."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from bus.client import RpcClient
from bus.errors import CallTimeout
from tests.conftest import require
from wire.messages.bus import Hello, Status

from ..bus.procs import ROOT, busctl_cmd, cli, env, unique_cluster
from ..serve.stack import Stack

pytestmark = pytest.mark.slow

NO_ANSWER_S = 2.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_path):
    require(zmq.has("curve"), "this libzmq has no CURVE")
    s = Stack(tmp_path_factory.mktemp("keyed-run"), "--shards", "2", "--model", str(model_path),
              "--cluster", unique_cluster())
    s.outsider = tmp_path_factory.mktemp("other-user-run")   # another user's runtime folder
    yield s
    s.close()


def run_all(runs: dict[str, tuple[list[str], dict]], timeout: float = 90) -> dict:
    """Run commands side by side: name -> (exit status, stdout, stderr)."""
    procs = {what: subprocess.Popen(cmd, cwd=ROOT, env={**env(), **e}, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
             for what, (cmd, e) in runs.items()}
    return {what: (p.wait(timeout), *p.communicate()) for what, p in procs.items()}


def test_the_stack_has_a_key_of_its_own_readable_by_its_user_alone(stack):
    key = Path(stack.info["key_file"])
    assert key.parent == stack.file.parent
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stack.key is not None
    assert "LLMBUS_KEY_FILE" not in stack.drain_output()    # nothing to copy by hand


async def test_an_unkeyed_process_gets_no_answer_from_any_service(stack):
    ctx = zmq.asyncio.Context.instance()

    async def ask(peer: str, key, body) -> str:
        c = RpcClient(ctx, f"tcp://{peer}", key=key)
        try:
            reply = await c.call(body, NO_ANSWER_S)
            return getattr(reply, "name", type(reply).TYPE)
        except CallTimeout:
            return "silent"
        finally:
            await c.close()

    peers = stack.info["peers"]       # health, tokenizer, scheduler, gateway and both shards
    member = await asyncio.gather(*(ask(p, stack.key, Status()) for p in peers))
    outsider = await asyncio.gather(*(ask(p, None, b) for p in peers
                                      for b in (Status(), Hello(cluster=stack.info["cluster"]))))
    assert "silent" not in member and {"scheduler-0", "shard-0"} <= set(member), member
    assert outsider == ["silent"] * len(outsider), outsider


def test_busctl_and_chat_find_the_stack_with_no_flags_and_with_its_cluster(stack):
    cluster = stack.info["cluster"]
    ask = ["Name three primary colors.", "--max-tokens", "3", "--temperature", "0"]
    out = run_all({
        "list": (busctl_cmd("list", "--json", "--wait", "1"), stack.env),
        "list --cluster": (busctl_cmd("list", "--json", "--wait", "1", "--cluster", cluster),
                           stack.env),
        "status": (busctl_cmd("status", "scheduler-0", "--json", "--wait", "2"), stack.env),
        "chat": (cli("chat", *ask), stack.env),
        "chat --cluster": (cli("chat", "--cluster", cluster, *ask), stack.env),
    })
    want = {"health-0", "tokenizer-0", "scheduler-0", "gateway-0", "shard-0"}
    for what in ("list", "list --cluster"):
        rc, stdout, stderr = out[what]
        assert rc == 0 and want <= {r["name"] for r in json.loads(stdout)}, (what, stderr)
    rc, stdout, stderr = out["status"]
    assert rc == 0 and json.loads(stdout)["name"] == "scheduler-0", stderr
    for what in ("chat", "chat --cluster"):
        rc, stdout, stderr = out[what]
        assert rc == 0 and stdout.strip(), (what, stdout, stderr)


def test_six_unkeyed_busctl_kills_do_nothing(stack):
    health = stack.info["peers"][0]
    outsider = {"LLMBUS_RUNTIME_DIR": str(stack.outsider)}
    kill = busctl_cmd("kill", "tokenizer-0", "--signal", "SIGKILL", "--cluster",
                      stack.info["cluster"], "--no-mdns", "--peer", health, "--wait", "1",
                      "--timeout", "1")
    out = run_all({f"kill {i}": (kill, outsider) for i in range(6)})
    for what, (rc, stdout, stderr) in out.items():
        assert rc != 0 and "sent" not in stdout, (what, stdout, stderr)
    rc, stdout, stderr = run_all({"list": (busctl_cmd("list", "--json", "--wait", "1"),
                                           stack.env)})["list"]
    rows = {r["name"]: r for r in json.loads(stdout)}
    tok = rows["tokenizer-0"]
    assert tok["state"] == "up" and tok["health"]["restarts"] == 0, tok


def test_chat_by_cluster_without_a_key_trusts_no_scheduler_on_the_network(stack, tmp_path):
    rc, stdout, stderr = run_all({"chat": (
        cli("chat", "--cluster", stack.info["cluster"], "hello", "--max-tokens", "2"),
        {"LLMBUS_RUNTIME_DIR": str(tmp_path)})})["chat"]
    assert rc != 0 and not stdout and "trusted only with the cluster's key" in stderr, stderr


def test_a_bus_bound_beyond_loopback_without_a_key_refuses_to_start(tmp_path):
    try:
        r = subprocess.run(cli("run", "echo", "--host", "0.0.0.0", "--no-mdns"), cwd=ROOT,
                           env=env(), capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("an unkeyed echo service bound on 0.0.0.0 started")
    assert r.returncode == 2 and "--insecure" in r.stderr and "key" in r.stderr, r.stderr
