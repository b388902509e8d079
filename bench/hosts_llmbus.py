"""llmbus on namespace hosts (tests/cluster/hosts.py): the tokenizer, scheduler and gateway on the
first host, a shard on every host, placed by the memory each offers (no --layers): a shard
started inside a memory-limited host offers its group's room. Services find each other by mDNS.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.hosts import Hosts

HTTP_PORT = 8080


@dataclass
class Llmbus:
    hosts: Hosts
    cluster: str
    ctl: str                              # the host of tokenizer, scheduler and gateway
    shards: dict[str, str] = field(default_factory=dict)   # label -> host
    started: float = 0.0                  # time.monotonic() when the processes were started

    @property
    def base(self) -> str:
        return f"http://{self.hosts.addr[self.ctl]}:{HTTP_PORT}"

    def service(self, host: str, kind: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "services.cli", "run", kind, "--cluster", self.cluster,
                "--host", self.hosts.addr[host], "--insecure", *extra]


def start(hosts: Hosts, shard_hosts: list[str], model: Path, *, pages: int, threads: int,
          codec: str = "fp16", memory: dict[str, int] | None = None,
          scheduler_args: tuple[str, ...] = ()) -> Llmbus:
    """Start every process at once; `memory` gives a shard an explicit --memory (else its room)."""
    run = Llmbus(hosts, f"b{uuid.uuid4().hex[:10]}", shard_hosts[0])
    run.started = time.monotonic()
    ctl = run.ctl
    hosts.start(ctl, "tokenizer", run.service(ctl, "tokenizer", "--model", str(model)))
    hosts.start(ctl, "scheduler", run.service(ctl, "scheduler", *scheduler_args))
    hosts.start(ctl, "gateway", run.service(ctl, "gateway", "--http", f"{hosts.addr[ctl]}:{HTTP_PORT}"))
    for h in shard_hosts:
        mem = ("--memory", str(memory[h])) if memory and h in memory else ()
        label = f"shard-{h}"
        hosts.start(h, label, run.service(h, "shard", "--model", str(model), "--pages", str(pages),
                                          "--threads", str(threads), "--codec", codec, *mem))
        run.shards[label] = h
    return run


def status(run: Llmbus, name: str) -> dict:
    """`busctl status NAME --json`, asked from the first host (mDNS finds the service)."""
    argv = [sys.executable, "-m", "bus.busctl", "status", name, "--cluster", run.cluster, "--json"]
    out = subprocess.run(run.hosts.argv(run.ctl, argv), capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"busctl status {name}: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout)


def placement(run: Llmbus) -> dict:
    return status(run, f"scheduler-{run.ctl}-0").get("info", {}).get("placement", {})


def counters(run: Llmbus, name: str) -> dict:
    return status(run, name).get("counters", {})


def stats(run: Llmbus) -> dict[str, float]:
    """The scheduler's `scheduler.stats` (driver timings per shard, hop figures, counters)."""
    argv = [sys.executable, "-m", "bus.busctl", "call", f"scheduler-{run.ctl}-0", "scheduler.stats",
            "{}", "--cluster", run.cluster, "--json"]
    out = subprocess.run(run.hosts.argv(run.ctl, argv), capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"scheduler.stats: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout)["body"]["stats"]
