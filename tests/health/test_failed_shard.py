"""A shard that cannot start is given up after the restart budget, and every surface says so:
the watcher's `health.service_failed` event, `busctl list`, the gateway's `/health`, and the
request that was waiting for its layers, which ends with reason `range_failed` instead of hanging.

Real failure, no fake: the stack runs on its own link to the model file; the test removes that
link (as a lost disk would) and has `busctl kill` SIGKILL the last shard through the watcher;
every respawn then exits at start ("no model file").
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess

import aiohttp
import pytest

from bus.errors import RemoteError
from wire.messages.bus import Status
from wire.messages.scheduler import Generate

from ..bus.procs import ROOT, busctl_cmd, env
from ..serve.stack import Stack, call, generate
from ..waiting import until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def doomed(tmp_path_factory, model_path):
    folder = tmp_path_factory.mktemp("doomed")
    own = folder / model_path.name
    try:
        os.link(model_path, own)      # another name for the same bytes: removing it loses nothing
    except OSError:
        shutil.copyfile(model_path, own)
    s = Stack(folder / "run", "--shards", "2", "--model", str(own),
              "--restart-budget", "2", "--budget-window", "60")
    s.model_link = own
    yield s
    s.stop()


def busctl(stack, *args: str) -> subprocess.CompletedProcess:
    e = env()
    e.update(LLMBUS_CLUSTER=stack.info["cluster"], LLMBUS_MDNS="0",
             LLMBUS_PEERS=",".join(stack.info["peers"]), LLMBUS_KEY_FILE=stack.info["key_file"])
    return subprocess.run(busctl_cmd(*args), cwd=ROOT, env=e, capture_output=True, text=True,
                          timeout=60)


async def test_a_shard_that_cannot_start_is_failed_everywhere_and_its_request_ends(doomed):
    last = (await call(doomed.endpoint, Status())).info["pipeline"][-1]
    body = Generate(messages=[{"role": "user", "content": "Tell me a long story about a fox."}],
                    temperature=0.0, max_tokens=2000)
    tokens = 0

    def count(n: int) -> None:
        nonlocal tokens
        tokens = n

    answer = asyncio.ensure_future(generate(doomed.endpoint, body, on_tokens=count))
    await until(lambda: tokens >= 2, timeout=60, what="the request's first tokens")

    doomed.model_link.unlink()
    killed = await asyncio.to_thread(busctl, doomed, "kill", last, "--signal", "KILL")
    assert killed.returncode == 0, killed.stderr
    assert f"sent SIGKILL to {last}" in killed.stdout

    # The request ends with the reason; it does not wait out the scheduler's 300 s budget.
    res = await asyncio.wait_for(answer, 90)
    assert res.done is not None and res.done.finish_reason == "failed", res.events[-1:]
    assert res.done.detail.startswith("range_failed") and last in res.done.detail, res.done.detail

    # `llmbus up` prints the event just after publishing it, then the tail of the service's log;
    # both may still be on the way through the pipe when the request's end has arrived.
    given_up = f"service_failed: {last}: 3 failures within 60 s"
    tail = f"{last} is given up; its log ends:\n"

    def told() -> bool:
        out = doomed.drain_output()
        return given_up in out and "no model file" in out.partition(tail)[2]

    await until(told, 30, what=f"{given_up}, then its log's tail")

    listed = await asyncio.to_thread(busctl, doomed, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert last in rows, (listed.stdout, listed.stderr)
    assert rows[last]["state"] == "failed" and rows[last]["health"]["restarts"] == 2, rows[last]
    assert "exited with status 1" in rows[last]["health"]["last_error"]
    assert rows["scheduler-0"]["state"] == "up" and rows["scheduler-0"]["health"]["restarts"] == 0
    text = await asyncio.to_thread(busctl, doomed, "list")
    assert any(line.startswith(last) and " failed " in line for line in text.stdout.splitlines()), text.stdout

    async with aiohttp.ClientSession() as s:
        async with s.get(doomed.http + "/health") as r:
            status, health = r.status, await r.text()
    assert status == 503 and f"{last}: failed, given up by health-0" in health, (status, health)

    # A new request is refused at once, with the same reason.
    with pytest.raises(RemoteError) as refused:
        await generate(doomed.endpoint, body)
    assert refused.value.code == "range_failed"
