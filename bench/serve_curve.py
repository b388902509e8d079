"""What CURVE costs the stack: the same workload on a plain stack and on a keyed one
(`llmbus up --key-file`), both up at once and driven in turns, level by level, so that the two
figures of a level are taken seconds apart under the same load of the machine.

    OPENBLAS_NUM_THREADS=1 python3 -m bench.serve --curve [--shards-list 3] [--concurrency 1,8,32]
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from bench.serve_workload import Summary, Workload, make_prompts, summarize

ROUNDS = 2     # each level: plain, keyed, plain, keyed (the order's own drift cancels out)


def bench_curve(args, tok, prompts: dict, row) -> list[str]:
    """Rows of both stacks at every level, then the keyed / plain throughput ratio per level."""
    from bench.serve_client import run_level
    from bench.serve_cpu import CpuMeter, stack_services
    from bench.serve_stack import LocalStack
    from bus.curve import new_key, read_key_file, write_key_file

    shards = args.shards_list[0]
    key_file = Path(tempfile.mkdtemp(prefix="llmbus-bench-curve-")) / "cluster.key"
    write_key_file(key_file, new_key())
    key = read_key_file(key_file)
    queue = max(256, 2 * max(args.concurrency))
    plain_stack = LocalStack(shards, model=args.model, pages=args.pages, max_queue=queue)
    keyed_stack = LocalStack(shards, model=args.model, pages=args.pages, max_queue=queue,
                             key_file=key_file)
    sides = {"plain": (plain_stack, None), "curve": (keyed_stack, key)}
    results: dict[str, dict[int, list]] = {name: {} for name in sides}
    cpu_s: dict[str, dict[int, float]] = {name: {} for name in sides}   # services' CPU seconds
    with plain_stack, keyed_stack:
        for name, (stack, k) in sides.items():
            print(f"# {name} {shards}-shard: up in {stack.ready_s:.1f}s at {stack.scheduler}",
                  flush=True)
            warm = make_prompts(tok, 2, Workload(max_tokens=8, requests_per_client=1), salt=-1)
            asyncio.run(run_level(stack.scheduler, warm, 2, Workload(max_tokens=8), key=k))
        cpus = {name: CpuMeter(stack_services(stack.pid)) for name, (stack, _) in sides.items()}
        for c in args.concurrency:
            for r in range(ROUNDS):
                for name, (stack, k) in sides.items():
                    # Each round its own prompts: the prefix cache must not serve round two.
                    ps = prompts[c] if r == 0 else _reprompt(tok, c, args.workload, r)
                    cpus[name].start()
                    timings = asyncio.run(run_level(stack.scheduler, ps, c, args.workload, key=k))
                    used = cpus[name].stop()
                    s = summarize(c, timings)
                    results[name].setdefault(c, []).append(s)
                    cpu_s[name][c] = cpu_s[name].get(c, 0.0) + sum(
                        v for k, v in used.items() if k != "bench")
                    print(row(f"{name} {shards}-shard", s,
                              f"round {r + 1}; {cpus[name].note(s.tokens)}"), flush=True)
                    first_error(timings)
    return cost_lines(results, cpu_s, shards)


def first_error(timings) -> None:
    for t in timings:
        if t.error:
            print(f"  error: {t.error}", flush=True)
            return


def _reprompt(tok, c: int, workload: Workload, r: int):
    return make_prompts(tok, c * workload.requests_per_client, workload, salt=1000 * r + c)


def cost_lines(results: dict[str, dict[int, list[Summary]]], cpu_s: dict[str, dict[int, float]],
               shards: int) -> list[str]:
    """keyed / plain throughput at each level, from the tokens and seconds of all its rounds, and
    the services' CPU per token: on a shared machine the steadier figure of what the cipher adds
    (a service restarted during a level is missing from it; its row says so)."""
    out = []
    for c in sorted(results["plain"]):
        tokens = {name: sum(s.tokens for s in rs[c]) for name, rs in results.items()}
        tput = {name: tokens[name] / sum(s.seconds for s in rs[c]) for name, rs in results.items()}
        itl = {name: 1e3 * sum(s.itl_p50 for s in rs[c]) / len(rs[c]) for name, rs in results.items()}
        cpu = {name: 1e3 * cpu_s[name].get(c, 0.0) / max(tokens[name], 1) for name in results}
        out.append(f"CURVE cost, {shards}-shard C={c}: throughput keyed / plain = "
                   f"{tput['curve'] / tput['plain']:.3f} ({tput['curve']:.1f} vs "
                   f"{tput['plain']:.1f} tok/s), mean ITL p50 {itl['curve']:.1f} vs "
                   f"{itl['plain']:.1f} ms, services' CPU {cpu['curve']:.1f} vs "
                   f"{cpu['plain']:.1f} ms/token")
    return out
