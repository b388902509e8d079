"""llmbus beside llama.cpp's RPC on the same memory-limited hosts, model and links.

    python3 -m bench.rpc_compare --llama-bin DIR [--model 8b] [--hosts 3] [--delays 0,5]
                                 [--rounds 2] [--tokens 24] [--json OUT]

Each host is a network namespace under a memory limit of its own (a cgroup; by default one that
holds a third of the model and its KV with room for the processes, well under the file's size:
no host can hold the model). llmbus runs its tokenizer, scheduler and gateway on the first host
and a shard on every host, placed by the memory each offers (no --layers). llama.cpp runs
`rpc-server` on every host but the first and `llama-server` on the first, computing its own
layers there (-ngl and --tensor-split chosen to balance the hosts' bytes: bench/hosts_llamacpp.py).
Both serve HTTP; one client host asks both the same streamed greedy chats. With a delay, every
frame between two hosts is late by that much (a userspace bridge: this kernel has no netem).

Per delay it prints: start to first answer (every process started at once, each host's range
cache of llmbus empty; llama.cpp's rpc-server without its cache), the bytes each host sent and
received meanwhile (llmbus hosts read their own file; llama.cpp pushes weights to its RPC
servers), decode tokens/s at concurrency 1 and 8 in interleaved rounds (llmbus then llama.cpp,
then the other way round), and each process's resident memory against the bytes of what it holds.

`--llama-bin` is a build of llama.cpp with GGML_RPC=ON (`ggml-rpc-server`, `llama-server`) from
the llama.cpp source inside the llama-cpp-python sdist: `python3 -m bench.rpc_build --out DIR`.
`--engines llmbus` runs llmbus alone (the 1- and 2-host runs bench/simulate.py checks against).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import hosts_llamacpp, hosts_llmbus  # noqa: E402
from bench.shard_memory import gguf_range_bytes  # noqa: E402
from services.modelstore.footprint import Footprint, read_footprint  # noqa: E402
from tests.cluster.hosts import Hosts  # noqa: E402
from tests.cluster.link_probe import probe  # noqa: E402

GiB, MiB = 1 << 30, 1 << 20
PROCESS_ROOM = 600 * MiB     # interpreters, tokenizer, scheduler and gateway, a range being built
PAGES, PAGE_SIZE = 128, 16   # llmbus KV per shard: 2048 tokens, as llama.cpp's -c below
CTX = PAGES * PAGE_SIZE
PREFIX = {"llmbus": "m", "llamacpp": "r"}


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="8b", help="a bench/synthetic.py preset, or a GGUF path")
    ap.add_argument("--llama-bin", type=Path, default=None, help="llama.cpp build with GGML_RPC=ON")
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--memory", type=float, default=0.0,
                    help="GiB each host may use (default: a share of the model and its KV, "
                         "plus room for the processes; 0 with --hosts 1: no limit)")
    ap.add_argument("--delays", default="0,5", help="ms added to every frame between two hosts")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=24, help="tokens each request generates")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="threads of each llmbus shard")
    ap.add_argument("--llama-threads", type=int, default=0,
                    help="threads of each llama.cpp process (default: --threads)")
    ap.add_argument("--restarts", type=int, default=1,
                    help="after the rounds, start each engine again this many times (timed)")
    ap.add_argument("--engines", default="llmbus,llamacpp")
    ap.add_argument("--inflight", type=int, default=0, help="llmbus micro-batches in flight "
                    "(0: the scheduler's default, services/scheduler/pipelines/overlap.py)")
    ap.add_argument("--sequential", action="store_true",
                    help="one engine up at a time, each round starting both in turn (half the "
                         "memory; a round's engines run minutes apart instead of side by side)")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--logs", type=Path, default=None)
    return ap.parse_args()


def model_path(spec: str) -> Path:
    if Path(spec).exists():
        return Path(spec)
    from bench.synthetic import synthetic_model
    return synthetic_model(spec, "q4_0")


def default_memory(fp: Footprint, n_hosts: int) -> int | None:
    if n_hosts == 1:
        return None
    kv = fp.kv_bytes_per_layer(PAGES, PAGE_SIZE) * fp.n_layers
    whole = sum(fp.layer_bytes) + fp.first_bytes + fp.last_bytes + kv
    return int(whole / n_hosts * 1.1) + PROCESS_ROOM


class Bench:
    """Both engines on one network: hosts m1..mN for llmbus, r1..rN for llama.cpp's RPC."""

    def __init__(self, args, model: Path, fp: Footprint, delay: float, logs: Path, memory: int | None):
        self.args, self.model, self.fp, self.memory = args, model, fp, memory
        self.hosts = Hosts(logs, delay_ms=delay)
        self.engines = args.engines.split(",")
        self.names = {e: [f"{PREFIX[e]}{i + 1}" for i in range(args.hosts)] for e in self.engines}
        try:
            for names in self.names.values():
                for h in names:
                    self.hosts.add(h, memory)
            self.hosts.add("client")
        except BaseException:
            self.hosts.close()
            raise
        self.runs: dict = {}
        self.out: dict = {"delay_ms": delay, "memory_limit": memory, "starts": {}, "rounds": [],
                          "memory": {}, "link": probe(self.hosts.net, "client", self.names[self.engines[0]][0])}

    def client(self, *argv: str, timeout: float = 3600) -> dict:
        out = subprocess.run(self.hosts.argv("client", [sys.executable, "-m", "bench.hosts_client", *argv]),
                             capture_output=True, text=True, timeout=timeout, cwd=Path(__file__).parents[1])
        if out.returncode != 0:
            raise RuntimeError(f"client {argv[1]}: {out.stderr.strip()[-1500:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def start(self, engine: str) -> None:
        """Start `engine` on its hosts and time the first answer; `cold`: no llmbus host has a
        range cache yet (llama.cpp's rpc-server runs without its cache: it always is)."""
        names, a = self.names[engine], self.args
        cold = engine == "llamacpp" or not any((self.hosts.cache(h) / "weights").exists() for h in names)
        before = {h: self.hosts.net.link_bytes(h) for h in names}
        if engine == "llmbus":
            # Every answer runs its full length, as llama.cpp's with ignore_eos: no phrase-loop
            # detection (greedy answers of random weights loop at once, and would end early).
            extra = ("--phrase-repeats", "0") + (("--inflight", str(a.inflight)) if a.inflight else ())
            run = hosts_llmbus.start(self.hosts, names, self.model, pages=PAGES, threads=a.threads,
                                     scheduler_args=extra)
        else:
            run = hosts_llamacpp.start(self.hosts, names, self.model, a.llama_bin, self.fp,
                                       threads=a.llama_threads or a.threads,
                                       parallel=max(map(int, a.concurrency.split(","))), ctx=CTX, cache=False)
        self.runs[engine] = run
        first = self.client(run.base, "first-answer", "--since", str(run.started))
        after = {h: self.hosts.net.link_bytes(h) for h in names}
        first.update(cold=cold, link_bytes={h: [after[h][0] - before[h][0], after[h][1] - before[h][1]]
                                            for h in names})
        self.out["starts"].setdefault(engine, []).append(first)
        if engine == "llmbus":
            self.out["placement"] = hosts_llmbus.placement(run).get("ranges")
        else:
            self.out["llamacpp_layout"] = {"ngl": run.lay.ngl, "tensor_split": run.lay.tensor_split,
                                           "ranges": run.lay.ranges, "bytes": run.lay.bytes}
        print(f"  {engine}: first answer {first['answer_s']:.1f} s after start "
              f"(healthy at {first['healthy_s']:.1f} s; {'cold' if cold else 'warm'})", flush=True)

    def refaulted(self, engine: str) -> dict[str, int | None]:
        return {h: g.refaulted() for h in self.names[engine] if (g := self.hosts.groups.get(h)) is not None}

    def load(self, engine: str, concurrency: int) -> dict:
        extra = {"ignore_eos": True} if engine == "llamacpp" else {}
        run = self.runs[engine]
        first = f"shard-{self.names[engine][0]}-0"
        before = (hosts_llmbus.counters(run, first), hosts_llmbus.stats(run)) if engine == "llmbus" else ()
        refaulted = self.refaulted(engine)
        got = self.client(run.base, "load", "--concurrency", str(concurrency),
                          "--max-tokens", str(self.args.tokens), "--extra", json.dumps(extra))
        # File pages each host read again while the level ran: its memory limit taking back the
        # weights it decodes from (mapped or read), which then come from the disk every step.
        got["refaulted_bytes"] = {h: n - refaulted[h] for h, n in self.refaulted(engine).items()
                                  if refaulted.get(h) is not None and n is not None}
        if engine == "llmbus":
            # Micro-batches in flight, on average: the sequences over the rows a batch carried.
            batches = hosts_llmbus.counters(run, first)["forwards"] - before[0]["forwards"]
            got["inflight"] = concurrency * batches / max(1, sum(got["tokens"]))
            # Where the level's time went, as the scheduler saw it (compute per shard, hops).
            after = hosts_llmbus.stats(run)
            # (and the prompt tokens the prefix cache served: a round asks the prompts of the
            # round before, and a hit is prefill not computed)
            got["scheduler"] = {k: round(v - before[1].get(k, 0.0), 3) for k, v in after.items()
                                if isinstance(v, (int, float)) and (k.startswith(("driver.", "hop."))
                                                                    or k in ("tokens_per_s", "prefix_hit_tokens",
                                                                             "prefix_query_tokens"))}
        print(f"  {engine:9} c={concurrency}: decode {got['decode_tok_s']:6.2f} tok/s "
              f"(ITL {got['itl_ms'] or 0:7.1f} ms, tokens {sum(got['tokens'])}, errors {len(got['errors'])}"
              + (f"; read again after reclaim {sum(got['refaulted_bytes'].values()) / (1 << 20):.0f} MiB"
                 if got["refaulted_bytes"] else "") + ")", flush=True)
        return got

    def levels(self, engine: str, row: dict) -> None:
        for c in map(int, self.args.concurrency.split(",")):
            row[f"{engine}@{c}"] = self.load(engine, c)

    def interleaved(self) -> None:
        """Both engines up: per round, each level on one engine then the other (the order
        turns every round)."""
        for e in self.engines:
            self.start(e)
        for r in range(self.args.rounds):
            order = self.engines if r % 2 == 0 else self.engines[::-1]
            row = {}
            for c in map(int, self.args.concurrency.split(",")):
                for e in order:
                    row[f"{e}@{c}"] = self.load(e, c)
            self.out["rounds"].append(row)
        for e in self.engines:
            self.resident(e)
        for _ in range(self.args.restarts):
            for e in self.engines:      # llmbus's hosts have their range caches now: warm
                self.stop(e)
                self.start(e)

    def sequential(self) -> None:
        """One engine up at a time: per round, each engine started, measured and stopped in
        turn (the order turns every round)."""
        for r in range(self.args.rounds):
            order = self.engines if r % 2 == 0 else self.engines[::-1]
            row = {}
            for e in order:
                self.start(e)
                self.levels(e, row)
                self.resident(e)
                self.stop(e)
            self.out["rounds"].append(row)

    def resident(self, engine: str) -> None:
        """Each process's resident bytes against what it holds."""
        rows = {}
        if engine == "llmbus":
            ranges = {r[0].split("-")[1]: (r[1], r[2]) for r in self.out.get("placement") or []}
            kv = self.fp.kv_bytes_per_layer(PAGES, PAGE_SIZE)
            for label, h in self.runs[engine].shards.items():
                a, b = ranges.get(h, (0, 0))
                rows[label] = {**self.hosts.memory(label), "held": gguf_range_bytes(self.model, a, b),
                               "kv": kv * (b - a), "layers": [a, b]}
        else:
            lay = self.runs[engine].lay
            for i, h in enumerate(self.names[engine]):
                label = f"llama-server-{h}" if i == 0 else f"rpc-{h}"
                rows[label] = {**self.hosts.memory(label), "held": lay.bytes[i], "layers": list(lay.ranges[i])}
        for h in self.names[engine]:
            g = self.hosts.groups.get(h)
            if g is not None:
                rows[f"host {h}"] = {"peak": g.peak(), "limit": g.limit, "oom_kills": g.oom_kills()}
        self.out["memory"][engine] = rows

    def stop(self, engine: str) -> None:
        labels = [k for k, h in self.hosts.host_of.items() if h in self.names[engine]]
        self.hosts.stop(labels)

    def close(self) -> None:
        self.hosts.close()


def run_delay(args, model: Path, fp: Footprint, delay: float, logs: Path) -> dict:
    memory = int(args.memory * GiB) if args.memory else default_memory(fp, args.hosts)
    print(f"\n== {args.hosts} host(s), {delay:g} ms added per frame between hosts, memory limit "
          f"{'none' if memory is None else f'{memory / GiB:.2f} GiB'} per host "
          f"(model file {model.stat().st_size / GiB:.2f} GiB)", flush=True)
    b = Bench(args, model, fp, delay, logs, memory)
    try:
        b.sequential() if args.sequential else b.interleaved()
    finally:
        b.close()
    return b.out


def main() -> int:
    args = parse()
    if "llamacpp" in args.engines and (args.llama_bin is None or not (args.llama_bin / "llama-server").exists()):
        raise SystemExit("--llama-bin DIR: a llama.cpp build with ggml-rpc-server and llama-server "
                         "(python3 -m bench.rpc_build --out DIR)")
    model = model_path(args.model)
    fp = read_footprint(model)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="llmbus-rpc-compare-"))
    print(f"{model.name}: {fp.n_layers} layers, {model.stat().st_size / GiB:.2f} GiB; "
          f"{args.threads} thread(s) per process; every host shares this machine's "
          f"{len(os.sched_getaffinity(0))} cores; logs in {logs}", flush=True)
    results = {"model": str(model), "hosts": args.hosts, "threads": args.threads,
               "tokens": args.tokens, "pages": PAGES, "cores": len(os.sched_getaffinity(0)),
               "runs": []}
    for delay in map(float, args.delays.split(",")):
        out = run_delay(args, model, fp, delay, logs / f"delay-{delay:g}")
        results["runs"].append(out)
        report(out, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def report(out: dict, args) -> None:
    """The delay's summary: ratios per round, and the memory table."""
    from bench.rpc_report import summary
    print(summary(out, args.concurrency), flush=True)


if __name__ == "__main__":
    sys.exit(main())
