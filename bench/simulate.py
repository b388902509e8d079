"""What more hosts would give: llmbus's pipeline modelled from measured parts (bench/pipeline_model.py),
checked against measured runs, then projected to 8-64 hosts on a LAN and a WAN.

    python3 -m bench.simulate measure --out parts.json [--shapes 8b,70b] [--threads 2] [--reps 7]
    python3 -m bench.simulate check --parts parts.json RUN.json...     # bench/rpc_compare.py --json
    python3 -m bench.simulate table --parts parts.json

`measure` times the parts on this machine (bench/simulate_parts.py): each shape's layer cost per
batch size, prefill per chunk length and head, and the serving overheads of a hop and of the
scheduler's step. `check` predicts every llmbus run of the files (its hosts' layer ranges, its
links' delay and measured rate, the micro-batches it kept in flight, all hosts sharing this
machine's cores) and prints each prediction beside the measurement: decode tokens/s at
concurrency 1 and 8 and the time to first token; `within` is the bound the model must meet.
`table` projects hosts like this one (each its own cores, the measured threads) at 8, 16, 32 and
64 hosts, LAN (0.2 ms round trip, 1 Gb/s) and WAN (20 and 80 ms, 100 Mb/s), for each measured
shape: tokens/s at concurrency 1, 8 and 64 with the micro-batches in flight each needs, and the
time to first token of a 128-token prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pipeline_model import Costs, Link, Pipeline, at, even_stages  # noqa: E402

WITHIN = 0.15
NETWORKS = (("LAN 0.2 ms", 0.0002, 125e6), ("WAN 20 ms", 0.020, 12.5e6), ("WAN 80 ms", 0.080, 12.5e6))
HOSTS = (1, 2, 3, 8, 16, 32, 64)
CONCURRENCY = (1, 8, 64)
PROMPT = 128


def measure(args) -> None:
    from bench.simulate_parts import engine_costs, serving_overheads
    from bench.synthetic import PRESETS, Shape, synthetic_model

    parts = {"threads": args.threads, "cores": len(os.sched_getaffinity(0)), "shapes": {}}
    over = serving_overheads()
    parts["overheads"] = over
    print(f"hop {over['hop_overhead'] * 1e3:.2f} ms, scheduler step {over['step_overhead'] * 1e3:.2f} ms "
          f"(tiny-model ITL {over['itl_1_shard_s'] * 1e3:.1f} ms with 1 shard, "
          f"{over['itl_2_shards_s'] * 1e3:.1f} ms with 2)", flush=True)
    for name in args.shapes.split(","):
        full = PRESETS[name]
        # A few layers of the shape stand for all of them (each layer costs the same), as many as
        # the file has but the first and the last: a step then streams its weights from memory
        # as a shard's does (2 layers of the 8B shape, 0.4 GB read again and again, timed 18%
        # under the runs' shards by their least time and 16% over by their median).
        few = Shape(3, full.d_model, full.ffn_dim, full.n_heads, full.n_kv_heads, full.tied)
        shape = full if full.n_layers <= 32 else few
        model = synthetic_model(shape, "q4_0")
        inner = max(2, shape.n_layers - 2)
        costs = engine_costs(model, args.threads, layers=inner, reps=args.reps)
        costs.update(n_layers=full.n_layers, hop_overhead=over["hop_overhead"],
                     step_overhead=over["step_overhead"])
        parts["shapes"][name] = costs
        parts.setdefault("model_bytes", {})[name] = model_bytes(model, full.n_layers)
        print(f"{name}: a layer's decode {costs['layer_decode'][1] * 1e3:.2f} ms at 1 row, "
              f"{costs['layer_decode'][8] * 1e3:.2f} ms at 8, {costs['layer_decode'][64] * 1e3:.2f} ms at 64; "
              f"head {costs['head'][1] * 1e3:.1f} ms", flush=True)
    args.out.write_text(json.dumps(parts, indent=1))


def model_bytes(model: Path, n_layers: int) -> int:
    """The weights of the whole shape, from a file of a few of its layers."""
    from services.modelstore.footprint import read_footprint
    fp = read_footprint(model)
    return fp.layer_bytes[0] * n_layers + fp.first_bytes + fp.last_bytes


def costs_of(parts: dict, shape: str) -> Costs:
    return Costs.from_json(parts["shapes"][shape])


def check(args) -> int:
    """Every llmbus run of the files beside its predictions; exit status 1 if one made from the
    run's own stage costs is off by more than WITHIN."""
    parts = json.loads(args.parts.read_text())
    costs = costs_of(parts, args.shape)
    worst, compared = {"run": 0.0, "bench": 0.0}, 0
    print("model from each stage's costs as the run's shards timed them ('run'), and from the "
          "costs `measure` timed in one process ('bench'); every host on this machine's cores")
    print(f"{'run':30} {'what':20} {'measured':>9} {'run':>16} {'bench':>16}")
    for path in args.runs:
        results = json.loads(Path(path).read_text())
        # A stage alone keeps its threads' share of the run's cores busy: with as many threads as
        # cores, all of them (two such stages at once only contend).
        share = min(1.0, results.get("threads", results["cores"]) / results["cores"])
        for run in results["runs"]:
            label = f"{results['hosts']} host(s), {run['delay_ms']:g} ms"
            for what, measured, by_run, by_bench in predictions(costs, run, share):
                cells = []
                for key, got in (("run", by_run), ("bench", by_bench)):
                    if got is None:
                        cells.append(f"{'-':>16}")
                        continue
                    off = got / measured - 1
                    worst[key] = max(worst[key], abs(off))
                    compared += key == "run"
                    cells.append(f"{got:9.3f} {off:+6.1%}")
                print(f"{label:30} {what:20} {measured:9.3f} {' '.join(cells)}")
    met = compared > 0 and worst["run"] <= WITHIN      # no run carried its stage costs: not met
    print(f"worst: from the runs' stage costs {worst['run']:.1%}, from the bench's {worst['bench']:.1%} "
          f"(bound {WITHIN:.0%}): {'MET' if met else 'NOT MET'}")
    return 0 if met else 1


def predictions(costs: Costs, run: dict, cpu_share: float = 1.0) -> list[tuple]:
    """(what, measured, from the run's stage costs or None, from the bench's costs) for each
    llmbus level of one run of rpc_compare's JSON; its hosts share one CPU, of which a stage alone
    keeps `cpu_share` busy."""
    import statistics
    ranges = run.get("placement") or [[None, 0, costs.n_layers]]
    stages = tuple(b - a for _, a, b in ranges)
    net = run.get("link") or {}
    link = Link(rtt_s=net.get("rtt_s", 2 * run["delay_ms"] / 1000), bytes_per_s=net.get("bytes_per_s", 1e9))
    bench = Pipeline(costs, link, stages, cpu_share=cpu_share)
    out = []
    levels = sorted({int(k.split("@")[1]) for r in run["rounds"] for k in r if k.startswith("llmbus@")})
    for c in levels:
        rounds = [r for r in run["rounds"] if f"llmbus@{c}" in r]
        got = [r[f"llmbus@{c}"] for r in rounds]
        rate = statistics.median(g["decode_tok_s"] for g in got)
        inflight = statistics.median(micro_batches_of(g, c) for g in got)
        own = [in_run(bench, r[f"llmbus@{c}"], r["llmbus@1"], c) for r in rounds
               if r[f"llmbus@{c}"].get("scheduler") and r.get("llmbus@1", {}).get("scheduler")]
        out.append((f"decode tok/s, c={c}", rate,
                    statistics.median(p[0] for p in own) if own else None,
                    bench.decode_rate(c, inflight)))
        if c == 1:
            ttft = statistics.median(g["ttft_s"][0] for g in got)
            # The tokens the prefill computed: the prompt less what the prefix cache served (a
            # round repeats the round before's prompts; runs that did not record it count none).
            prompt = statistics.median(max(1, (g["prompt_tokens"][0] or 40)
                                           - int((g.get("scheduler") or {}).get("prefix_hit_tokens", 0)))
                                       for g in got)
            out.append(("first token s, c=1", ttft,
                        statistics.median(p[1] for p in own) if own else None, bench.ttft(int(prompt))))
    return out


def micro_batches_of(level: dict, c: int) -> float:
    """The micro-batches a level kept in flight while its sequences decoded: the sequences over
    the rows a decode batch carried. (rpc_compare's `inflight` counts the prefill batches too:
    8 prompts in chunks made a level whose decode ran in 1 micro-batch read as 1.4.)"""
    s = level.get("scheduler") or {}
    batches, tokens, requests = s.get("driver.decode_batches", 0.0), level.get("tokens"), level.get("requests")
    if batches and tokens and requests and sum(tokens) > requests:
        return max(1.0, min(float(c), c * batches / (sum(tokens) - requests)))
    return max(1.0, min(level.get("inflight", 1.0), float(c)))


def in_run(pipe: Pipeline, level: dict, alone: dict, c: int) -> tuple[float, float]:
    """Decode rate and first token of one level predicted from its round's own stage costs: each
    stage's compute per decode batch as the shards reported it, from a level that kept one batch
    in flight (no stage computed beside another and stretched its time). Where the level decoded
    in one micro-batch, its own steps: those of every sequence at once where the scheduler timed
    steps by their rows (`step_of`), else the mean of its steps (older runs; their ragged start
    and end made it a little short). Else the round's concurrency-1 level (`alone`), grown to the
    level's rows by the bench's cost of a layer at each batch size. Its prefill for the first token."""
    def split(level: dict) -> tuple[list[float], float, float]:
        s = level["scheduler"]
        per_stage = {k.removeprefix("driver.compute_ms."): v for k, v in s.items()
                     if k.startswith("driver.compute_ms.")}
        total = sum(per_stage.values()) or 1.0
        decode = s.get("driver.decode_compute_ms", 0.0)
        decode_ms = decode / max(1.0, s.get("driver.decode_batches", 0.0))
        prefills = max(1.0, s.get("driver.batches_done", 0.0) - s.get("driver.decode_batches", 0.0))
        # The shards' names: the stages' order does not matter to a cycle's length.
        return ([per_stage[n] / total * decode_ms / 1e3 for n in sorted(per_stage)],
                (total - decode) / prefills / 1e3, total)

    own, prefill_s, _ = split(level)
    full = step_of(level, c)            # steps of every sequence at once: one micro-batch
    m = 1.0 if full else micro_batches_of(level, c)
    rows = c / m
    if full:
        compute, grow = full, 1.0
    elif m <= 1.0:
        compute, grow = own, 1.0
    else:
        compute = step_of(alone, 1) or split(alone)[0]
        grow = at(pipe.costs.layer_decode, rows) / at(pipe.costs.layer_decode, 1)
    prompt = (level.get("prompt_tokens") or [40])[0] or 40
    return (c / pipe.cycle([x * grow for x in compute], rows, m),
            pipe.first_token(prefill_s, prompt))


def step_of(level: dict, rows: int) -> list[float] | None:
    """Each stage's seconds for one decode step of `rows` rows, from the level's steps of that
    size (the scheduler's `decode_compute_ms.<rows>.<shard>`), in the shards' names' order; None
    where the run did not time steps by rows or had none of that size."""
    s = level.get("scheduler") or {}
    n = s.get(f"driver.decode_batches.{rows}", 0.0)
    key = f"driver.decode_compute_ms.{rows}."
    per_stage = {k.removeprefix(key): v for k, v in s.items() if k.startswith(key)}
    if not n or not per_stage:
        return None
    return [per_stage[name] / n / 1e3 for name in sorted(per_stage)]


def table(args) -> None:
    parts = json.loads(args.parts.read_text())
    print(f"hosts like this one ({parts['threads']} threads each, their own cores), llmbus pipeline, "
          f"fp16 activations; tok/s (micro-batches in flight it needs); first token of {PROMPT} tokens")
    for shape in parts["shapes"]:
        costs = costs_of(parts, shape)
        weights = parts.get("model_bytes", {}).get(shape)
        print(f"\n{shape}: {costs.n_layers} layers" + (f", {weights / 2**30:.1f} GiB of weights" if weights else ""))
        head = " ".join(f"{'c=' + str(c):>14}" for c in CONCURRENCY)
        print(f"  {'network':11} {'hosts':>5} {'GiB/host':>8} {head} {'first token':>12}")
        for name, rtt, rate in NETWORKS:
            for n in HOSTS:
                pipe = Pipeline(costs, Link(rtt, rate), even_stages(costs.n_layers, n))
                used = len(pipe.stages)
                cells = []
                for c in CONCURRENCY:
                    m, r = pipe.best_inflight(c)
                    cells.append(f"{r:8.2f} ({m:>2})")
                hosts = f"{n}" if used == n else f"{n}*"
                per_host = f"{weights / used / 2**30:8.2f}" if weights else f"{'':8}"
                print(f"  {name:11} {hosts:>5} {per_host} {' '.join(f'{x:>14}' for x in cells)} "
                      f"{pipe.ttft(PROMPT):>10.2f} s")
    print("\n* more hosts than layers: one layer each on as many hosts as there are layers, the "
          "rest hold none (GiB/host counts the hosts that hold layers)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--shapes", default="8b,70b")
    m.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    m.add_argument("--reps", type=int, default=7, help="timings of each part (the least counts)")
    c = sub.add_parser("check")
    c.add_argument("--parts", type=Path, required=True)
    c.add_argument("--shape", default="8b")
    c.add_argument("runs", nargs="+")
    t = sub.add_parser("table")
    t.add_argument("--parts", type=Path, required=True)
    args = ap.parse_args()
    if args.what == "measure":
        measure(args)
        return 0
    if args.what == "check":
        return check(args)
    table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
