"""Placement across hosts: each host a network namespace on one bridge, found by mDNS only.

Three shard hosts with different --memory get ranges in proportion to it; a fourth joining
under 8 greedy streams gets a range, and a host killed later has its layers re-placed; every
answer is the undisturbed one. Prints the time from join / kill to serving on the new plan.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gguf import GGUFReader

from tests.conftest import require

from ..bus.procs import ROOT, busctl_cmd, env, unique_cluster
from .client import MAX_TOKENS, PROMPTS
from .hosts import Hosts
from .lines import Lines
from .netns import why_not

pytestmark = pytest.mark.slow

MiB = 1 << 20
MEMORY = {"s1": 100 * MiB, "s2": 150 * MiB, "s3": 200 * MiB, "s4": 150 * MiB}
PAGES, PAGE_SIZE = 64, 16


def held_bytes(model: Path) -> tuple[list[int], int, int]:
    """Bytes of each block, of the embeddings, and of the head (tied: the embeddings again),
    read with gguf's own reader, apart from the code under test."""
    r = GGUFReader(str(model))
    blocks: dict[int, int] = {}
    extra = {}
    for t in r.tensors:
        if t.name.startswith("blk."):
            i = int(t.name.split(".")[1])
            blocks[i] = blocks.get(i, 0) + int(t.n_bytes)
        else:
            extra[t.name] = int(t.n_bytes)
    embd = extra["token_embd.weight"]
    head = extra.get("output.weight", embd) + extra.get("output_norm.weight", 0)
    kv_heads = int(r.fields["llama.attention.head_count_kv"].contents())
    d, heads = (int(r.fields[f"llama.{k}"].contents()) for k in ("embedding_length", "attention.head_count"))
    kv = 2 * PAGES * PAGE_SIZE * kv_heads * (d // heads) * 4
    return [blocks[i] + kv for i in range(len(blocks))], embd, head


def assert_in_proportion(ranges: list, model: Path, memory: dict[str, int]) -> None:
    """Each shard holds its share of the whole to within the two layers its two ends may be off."""
    layers, embd, head = held_bytes(model)
    n = len(layers)
    assert [a for _, a, _ in ranges] == [0, *[b for _, _, b in ranges[:-1]]] and ranges[-1][2] == n
    total = sum(layers) + embd + head
    mem = {name: memory[name.split("-")[1]] for name, _, _ in ranges}
    for name, a, b in ranges:
        assert b > a, f"{name} holds no layer"
        held = sum(layers[a:b]) + (embd if a == 0 else 0) + (head if b == n else 0)
        share = total * mem[name] / sum(mem.values())
        assert abs(held - share) <= 2 * max(layers), (name, a, b, held, share, ranges)
        assert held <= mem[name]


def test_shards_are_placed_by_memory_and_replaced_on_join_and_loss(model_path, tmp_path):
    why = why_not()
    require(not why, f"the multi-host test needs network namespaces: {why}")
    hosts = Hosts(tmp_path)
    net = hosts.net
    cluster = unique_cluster()
    figures = {}
    try:
        addr = {h: hosts.add(h) for h in ("ctl", "client", "s1", "s2", "s3", "s4")}

        def service(host: str, kind: str, *extra: str) -> list[str]:
            return [sys.executable, "-m", "services.cli", "run", kind, "--cluster", cluster,
                    "--host", addr[host], "--insecure", *extra]

        shard = ["--model", str(model_path), "--pages", str(PAGES), "--page-size", str(PAGE_SIZE),
                 "--codec", "fp32"]   # lossless hops: the cut points move, the answers must not
        hosts.start("ctl", "tokenizer", service("ctl", "tokenizer", "--model", str(model_path)))
        hosts.start("ctl", "scheduler", service("ctl", "scheduler"))
        for h in ("s1", "s2", "s3"):
            hosts.start(h, h, service(h, "shard", "--memory", str(MEMORY[h]), *shard))
        client = Lines(hosts.start("client", "client", [
            sys.executable, "-m", "tests.cluster.client", "--cluster", cluster, "--host", addr["client"]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE))

        client.send("placed 3")
        placed = client.expect("placed", timeout=150)
        # Names come from each host's own hostname: no --name was given.
        assert [r[0] for r in placed["ranges"]] == ["shard-s1-0", "shard-s2-0", "shard-s3-0"]
        assert placed["scheduler"] == "scheduler-ctl-0"
        assert_in_proportion(placed["ranges"], model_path, MEMORY)
        client.send("reference")
        ref = client.expect("reference", timeout=120)
        assert all(n >= 10 for n in ref["tokens"]), ref

        # A fourth host joins while 8 streams run.
        client.send(f"churn {placed['plan']}")
        client.expect("streaming", timeout=60)
        t_join = time.monotonic()
        hosts.start("s4", "s4", service("s4", "shard", "--memory", str(MEMORY["s4"]), *shard))
        joined = client.expect("replaced", timeout=240)
        figures["join"] = (joined["t"] - t_join, joined["last_change"])
        assert any(r[0] == "shard-s4-0" for r in joined["ranges"]), joined
        assert_in_proportion(joined["ranges"], model_path, MEMORY)
        _all_undisturbed(client.expect("checked", timeout=120))

        # A host dies while 8 streams run: its layers go to the others.
        client.send(f"churn {joined['plan']}")
        client.expect("streaming", timeout=60)
        t_kill = time.monotonic()
        hosts.procs["s2"].send_signal(signal.SIGKILL)
        left = client.expect("replaced", timeout=240)
        figures["leave"] = (left["t"] - t_kill, left["last_change"])
        assert [r[0] for r in left["ranges"]] == ["shard-s1-0", "shard-s3-0", "shard-s4-0"], left
        assert_in_proportion(left["ranges"], model_path, MEMORY)
        _all_undisturbed(client.expect("checked", timeout=120))

        # From the client host, the commands find the cluster's scheduler on the network by
        # mDNS, given only --cluster (nothing of it runs on that host).
        listed = subprocess.run(net.cmd("client", [*busctl_cmd("list", "--cluster", cluster, "--json")]),
                                capture_output=True, text=True, timeout=120, env=env())
        seen = {r["name"]: r["host"] for r in json.loads(listed.stdout or "[]")}
        assert seen.get("scheduler-ctl-0") == addr["ctl"] and seen.get("shard-s4-0") == addr["s4"], listed
        chat = subprocess.run(net.cmd("client", [sys.executable, "-m", "services.cli", "chat", "--cluster",
                                                 cluster, "--insecure", "--temperature", "0", "--max-tokens",
                                                 str(MAX_TOKENS), PROMPTS[0]]),
                              cwd=ROOT, capture_output=True, text=True, timeout=120, env=env())
        assert chat.returncode == 0, chat.stderr
        assert chat.stdout.strip() == ref["texts"][0].strip(), (chat.stdout, ref["texts"][0])
    finally:
        hosts.close()
        for what, (seconds, change) in figures.items():
            print(f"{what}: {seconds:.2f} s to serving on the new plan (scheduler: {change})")


def _all_undisturbed(checked: dict) -> None:
    results = checked["results"]
    assert len(results) >= 8
    bad = [r for r in results if not r["ok"] or r["finish"] not in ("stop", "length")]
    assert not bad, bad[:3]
