"""A keyed stack (`llmbus up --key-file`, real processes on loopback): it serves llama.cpp's
greedy tokens to a client holding the cluster key, and to anyone else it is silent: no
handshake, no call answered, no heartbeat heard, nothing listed by busctl, no chat."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from bus.client import RpcClient
from bus.curve import read_key_file
from bus.errors import CallTimeout
from wire.messages.bus import Status
from wire.messages.scheduler import Generate

from ..bus.curve_heard import heartbeats_heard
from ..bus.procs import ROOT, busctl_cmd, cli, env
from tests.conftest import require
from .stack import Stack, generate

pytestmark = pytest.mark.slow

NO_ANSWER_S = 2.0
REFERENCE = json.loads((Path(__file__).parents[1] / "data" / "smollm2-135m-q4_1.llamacpp.json").read_text())
# "Name three primary colors." with llama.cpp's first two greedy tokens forced (their top-2
# margins are under 1.0): its next three lead the runner-up by more than our logits may move.
_COLORS = REFERENCE["chats"][2]
assert min(s[0][1] - s[1][1] for s in _COLORS["greedy_steps_top5"][2:5]) > 1.0


def keygen(path) -> None:
    subprocess.run(cli("keygen", "--out", str(path)), cwd=ROOT, env=env(), check=True,
                   capture_output=True)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, model_path):
    require(zmq.has("curve"), "this libzmq has no CURVE")
    keys = tmp_path_factory.mktemp("keys")
    keygen(keys / "cluster.key")
    keygen(keys / "other.key")
    s = Stack(tmp_path_factory.mktemp("curve-run"), "--shards", "2", "--model", str(model_path),
              "--key-file", str(keys / "cluster.key"))
    s.key_file, s.other_file = keys / "cluster.key", keys / "other.key"
    yield s
    s.close()


async def status_of(endpoint: str, key) -> str:
    c = RpcClient(zmq.asyncio.Context.instance(), endpoint, key=key)
    try:
        return (await c.call(Status(), NO_ANSWER_S)).name
    except CallTimeout:
        return "silent"
    finally:
        await c.close()


async def test_a_client_with_the_key_gets_llama_cpp_greedy_tokens(keyed):
    key = read_key_file(keyed.key_file)
    client = RpcClient(zmq.asyncio.Context.instance(), keyed.endpoint, key=key)
    try:
        forced = _COLORS["greedy_ids"][:2]
        res = await generate(keyed.endpoint, Generate(prompt_ids=_COLORS["prompt_ids"] + forced,
                                                      temperature=0.0, max_tokens=3), client=client)
    finally:
        await client.close()
    assert res.token_ids == _COLORS["greedy_ids"][2:5], (res.token_ids, res.done)


async def test_without_the_key_no_service_answers_and_no_heartbeat_is_heard(keyed):
    key, other = read_key_file(keyed.key_file), read_key_file(keyed.other_file)
    peers = [f"tcp://{p}" for p in keyed.info["peers"]]
    asked = [status_of(p, k) for k in (key, None, other) for p in peers]
    names = await asyncio.gather(*asked)
    n = len(peers)
    assert "silent" not in names[:n], names[:n]               # every service answers a member
    assert names[n:] == ["silent"] * (2 * n), names[n:]       # and nobody else

    # The scheduler's heartbeats: a member's SUB hears three while the others hear none.
    client = RpcClient(zmq.asyncio.Context.instance(), keyed.endpoint, key=key)
    try:
        pub = f"tcp://127.0.0.1:{(await client.handshake(keyed.info['cluster'])).pub_port}"
    finally:
        await client.close()
    heard = await heartbeats_heard(pub, key, {"plain": None, "other": other}, enough=3, timeout=15)
    assert heard["plain"] == 0 and heard["other"] == 0, heard


def test_busctl_and_chat_see_the_stack_only_with_its_key(keyed):
    base = {**env(), "LLMBUS_CLUSTER": keyed.info["cluster"], "LLMBUS_MDNS": "0",
            "LLMBUS_PEERS": ",".join(keyed.info["peers"]), "LLMBUS_RUNTIME_DIR": str(keyed.runtime)}
    runs = {
        "busctl member": (busctl_cmd("list", "--json", "--wait", "2"),
                          {**base, "LLMBUS_KEY_FILE": str(keyed.key_file)}),
        "busctl plain": (busctl_cmd("list", "--wait", "2"), base),
        "busctl other": (busctl_cmd("list", "--wait", "2"),
                         {**base, "LLMBUS_KEY_FILE": str(keyed.other_file)}),
        # The stack file says which key file the stack uses: a chat here finds it.
        "chat member": (cli("chat", "Name three primary colors.", "--max-tokens", "4",
                            "--temperature", "0"), base),
        "chat other": (cli("chat", "Name three primary colors.", "--max-tokens", "4"),
                       {**base, "LLMBUS_KEY_FILE": str(keyed.other_file)}),
    }
    procs = {what: subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
             for what, (cmd, e) in runs.items()}
    out = {what: (p.wait(60), *p.communicate()) for what, p in procs.items()}

    rc, stdout, stderr = out["busctl member"]
    assert rc == 0, stderr
    assert {r["name"] for r in json.loads(stdout)} >= {"health-0", "tokenizer-0", "scheduler-0",
                                                       "gateway-0", "shard-0"}
    rc, stdout, stderr = out["busctl plain"]
    assert rc == 3 and "no services found" in stderr and "give the key file" in stderr, stderr
    rc, stdout, stderr = out["busctl other"]
    assert rc == 3 and "CURVE is on here" in stderr, stderr
    rc, stdout, stderr = out["chat member"]
    assert rc == 0 and stdout.strip(), (stdout, stderr)
    rc, stdout, stderr = out["chat other"]
    assert rc != 0 and "nothing answers" in stderr and "CURVE is on here" in stderr, stderr
