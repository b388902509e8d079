"""A host lost mid-answer, on network-namespace hosts found by mDNS, with an 8B-style model of a
smaller shape (bench/synthetic.py: 8 llama layers of width 1024, Q4_0, random weights):

- with a replica of its range, no request is lost: the 8 streams in flight finish with the
  answers they give undisturbed;
- without one, the ranges are placed again on the memory left when the model fits there (the
  streams finish as undisturbed), and when it does not, /health and a new request answer 503
  naming the layers no host holds.

Answers are greedy over lossless hops (fp32), so a re-prefill on other shards gives the same
tokens.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest

from bench.synthetic import Shape, synthetic_model
from services.modelstore.footprint import read_footprint
from services.scheduler.placement.policy import Member, PlacementRefused, place
from tests.conftest import require

from ..bus.procs import unique_cluster
from .hosts import Hosts
from .lines import Lines
from .netns import ROOT, why_not

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

SHAPE = Shape(n_layers=8, d_model=1024, ffn_dim=4096, n_heads=16, n_kv_heads=4)
PAGES, PAGE_SIZE = 64, 16
TOKENS = 96          # long enough answers that a kill lands while every stream is mid-answer
MiB = 1 << 20
HTTP_PORT = 8080

# Asked from the client host: the gateway's /health once it is not 200, then one chat request:
# status and body of each.
ASK = """
import json, sys, time, urllib.request, urllib.error
base = sys.argv[1]
def ask(req):
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
for _ in range(300):      # the lost host's heartbeats expire first
    health = ask(base + "/health")
    if health[0] != 200:
        break
    time.sleep(0.1)
chat = ask(urllib.request.Request(base + "/v1/chat/completions", method="POST",
    headers={"Content-Type": "application/json"},
    data=json.dumps({"model": sys.argv[2], "max_tokens": 4,
                     "messages": [{"role": "user", "content": "Hello"}]}).encode()))
print(json.dumps({"health": health, "chat": chat}))
"""


@pytest.fixture(scope="module")
def model():
    return synthetic_model(SHAPE, "q4_0")


class Cluster:
    """Tokenizer, scheduler and gateway on host `ctl`, the test's client on `client`."""

    def __init__(self, hosts: Hosts, model, shard_hosts: list[str]):
        self.hosts, self.model, self.cluster = hosts, model, unique_cluster()
        for h in ("ctl", "client", *shard_hosts):
            hosts.add(h)
        hosts.start("ctl", "tokenizer", self.service("ctl", "tokenizer", "--model", str(model)))
        # The random weights answer one character over and over: streams must run their whole
        # length across the loss, not end as a repeated phrase.
        hosts.start("ctl", "scheduler", self.service("ctl", "scheduler", "--phrase-repeats", "0"))
        hosts.start("ctl", "gateway", self.service("ctl", "gateway", "--http",
                                                   f"{hosts.addr['ctl']}:{HTTP_PORT}"))
        self.client = Lines(hosts.start("client", "client", [
            sys.executable, "-m", "tests.cluster.client", "--cluster", self.cluster,
            "--host", hosts.addr["client"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE))

    def service(self, host: str, kind: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "services.cli", "run", kind, "--cluster", self.cluster,
                "--host", self.hosts.addr[host], "--insecure", *extra]

    def shard(self, host: str, *extra: str) -> None:
        self.hosts.start(host, host, self.service(
            host, "shard", "--model", str(self.model), "--pages", str(PAGES), "--page-size",
            str(PAGE_SIZE), "--codec", "fp32", "--threads", "1", *extra))

    def kill_mid_answer(self, host: str) -> list[int]:
        """Start every prompt at once, kill `host` once each stream has tokens; the tokens each
        stream had then."""
        self.client.send("once")
        self.client.expect("streaming", timeout=120)
        self.hosts.kill(host, signal.SIGKILL)
        self.client.send("mark")
        return self.client.expect("marked", timeout=30)["tokens"]

    def results(self, timeout: float) -> list[dict]:
        self.client.send("wait")
        return self.client.expect("checked", timeout=timeout)["results"]

    def ask_http(self, model_id: str) -> dict:
        out = subprocess.run(self.hosts.argv("client", [
            sys.executable, "-c", ASK, f"http://{self.hosts.addr['ctl']}:{HTTP_PORT}", model_id]),
            cwd=ROOT, capture_output=True, text=True, timeout=200)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)


def undisturbed(results: list[dict], marked: list[int]) -> None:
    bad = [r for r in results if not r["ok"] or r["finish"] not in ("stop", "length")]
    assert not bad, bad[:2]
    # The loss came mid-answer: streams had begun and had tokens still to come.
    assert all(n > 0 for n in marked) and any(n < r["tokens"] for n, r in zip(marked, results)), \
        (marked, [r["tokens"] for r in results])


def need_hosts():
    why = why_not()
    require(not why, f"the multi-host test needs network namespaces: {why}")


def test_a_replica_of_the_lost_range_loses_no_request(model, tmp_path):
    need_hosts()
    hosts = Hosts(tmp_path)
    try:
        c = Cluster(hosts, model, ["s1", "s2", "s2b", "s3"])
        for host, layers in (("s1", "0:3"), ("s2", "3:6"), ("s2b", "3:6"), ("s3", "6:8")):
            c.shard(host, "--layers", layers)
        c.client.send("pipeline")
        pipeline = c.client.expect("pipeline", timeout=180)["pipeline"]
        middle = next(n for n in pipeline if n.startswith(("shard-s2-", "shard-s2b-")))
        c.client.send(f"reference {TOKENS}")
        c.client.expect("reference", timeout=180)
        marked = c.kill_mid_answer(middle.split("-")[1])
        undisturbed(c.results(timeout=180), marked)
    finally:
        hosts.close()


def memory_for_two(model) -> int:
    """A budget per shard with which any two shards hold the model and one does not, by the
    placement policy's own arithmetic."""
    fp = read_footprint(model)
    kv = fp.kv_bytes_per_layer(PAGES, PAGE_SIZE)

    def fits(n: int, mem: int) -> bool:
        try:
            place(fp, [Member(f"s{i}", mem, kv) for i in range(n)])
            return True
        except PlacementRefused:
            return False

    mem = next(m * MiB for m in range(1, 4096) if fits(2, m * MiB)) + 4 * MiB
    assert fits(3, mem) and not fits(1, mem)
    return mem


def test_without_a_replica_the_layers_are_placed_again_or_503_names_them(model, tmp_path):
    need_hosts()
    mem = memory_for_two(model)
    hosts = Hosts(tmp_path)
    try:
        c = Cluster(hosts, model, ["s1", "s2", "s3"])
        for h in ("s1", "s2", "s3"):
            c.shard(h, "--memory", str(mem))
        c.client.send("placed 3")
        placed = c.client.expect("placed", timeout=180)
        assert [r[0] for r in placed["ranges"]] == ["shard-s1-0", "shard-s2-0", "shard-s3-0"]
        c.client.send(f"reference {TOKENS}")
        c.client.expect("reference", timeout=180)

        # s2 is lost: s1 and s3 have the memory for the whole model, and take it.
        marked = c.kill_mid_answer("s2")
        undisturbed(c.results(timeout=240), marked)
        c.client.send("placed 2")
        ranges = c.client.expect("placed", timeout=120)["ranges"]
        assert [r[0] for r in ranges] == ["shard-s1-0", "shard-s3-0"] and ranges[1][2] == SHAPE.n_layers
        held_by_s1 = ranges[0][2]

        # s3 is lost too: s1 alone cannot hold the model. /health, and a new request at once,
        # answer 503 naming the layers no host holds (the streams in flight wait for the
        # scheduler's unserved budget: the host may come back).
        c.kill_mid_answer("s3")
        c.client.send("refused")
        assert "does not fit" in c.client.expect("refused", timeout=60)["why"]
        missing = re.compile(rf"layers {held_by_s1}[-:]{SHAPE.n_layers}\b")
        answers = c.ask_http(f"synthetic-{SHAPE.label()}-q4_0")
        (health_status, health), (chat_status, chat) = answers["health"], answers["chat"]
        assert health_status == 503 and missing.search(health), health
        assert chat_status == 503 and missing.search(chat) and "does not fit" in chat, chat
    finally:
        hosts.close()

