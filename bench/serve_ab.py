"""The gateway's cost per token as a fair A/B at concurrency 1: each prompt is sent once on the
bus (a direct client of the scheduler) and once through the gateway (streamed OpenAI chat over
HTTP), one request at a time, the two sides interleaved (ABBA), on one stack.

Before each pair, a 1-token request on the same prompt puts its prefix in the scheduler's
prefix cache, so that both sides of the pair find the same cached pages: greedy decoding then
does the same computation on both sides, and what differs is the path from the scheduler to the
client. Issue 12's target: the gateway adds under 1 ms to inter-token latency p50.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

from bench.paired import PairedDiff, abba, added_latency, itl_diff
from bench.serve_workload import Prompt, RequestTiming, Workload

SIDES = ("direct", "gateway")


async def run_pairs(scheduler: str, http: str, model: str, prompts: list[Prompt],
                    workload: Workload, cpu=None) -> tuple[list[RequestTiming], list[RequestTiming],
                                                          dict[str, dict[str, float]]]:
    """Pair k is prompts[k] on both sides, in abba order; returns each side's timings (pair k
    at index k) and, with a CpuMeter, the CPU seconds each process used on each side."""
    import aiohttp
    import zmq.asyncio

    from bench.serve_client import one_request as bus_request
    from bench.serve_http import one_request as http_request
    from bus.client import RpcClient

    client = RpcClient(zmq.asyncio.Context.instance(), scheduler, sender="bench-ab")
    # One kept-alive connection, as a chat client holds one: a new TCP connection per request
    # would be the client's cost, not the gateway's.
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1),
                                    timeout=aiohttp.ClientTimeout(total=600))
    sides: tuple[list[RequestTiming], list[RequestTiming]] = ([], [])
    used: dict[str, dict[str, float]] = {s: {} for s in SIDES}
    warm = Workload(max_tokens=1, seed=workload.seed)

    async def one(side: int, p: Prompt, w: Workload) -> RequestTiming:
        t = RequestTiming(sent=time.perf_counter())
        try:
            if side == 0:
                await bus_request(client, p, w, t)
            else:
                await http_request(session, http, model, p, w, t)
        except Exception as e:  # a failed request loses its pair, it does not end the run
            t.error = f"{type(e).__name__}: {e}"
        return t

    try:
        for p, order in zip(prompts, abba(len(prompts))):
            await one(0, p, warm)              # the prompt's prefix now cached for both sides
            got: dict[int, RequestTiming] = {}
            for side in order:
                if cpu is not None:
                    cpu.start()
                got[side] = await one(side, p, workload)
                if cpu is not None:
                    for k, v in cpu.stop().items():
                        used[SIDES[side]][k] = used[SIDES[side]].get(k, 0.0) + v
            sides[0].append(got[0])
            sides[1].append(got[1])
    finally:
        await session.close()
        await client.close()
    return sides[0], sides[1], used


def report(direct: list[RequestTiming], gateway: list[RequestTiming],
           used: dict[str, dict[str, float]], target_ms: float) -> list[str]:
    """The A/B's lines: each side's figures, then the target's verdict with its spread."""
    ok = [k for k in range(len(direct)) if not direct[k].error and not gateway[k].error]
    lines = []
    for name, side in zip(SIDES, (direct, gateway)):
        errors = [t.error for t in side if t.error]
        if errors:
            lines.append(f"  {name}: {len(errors)} failed request(s), first: {errors[0]}")
    if not ok:
        return lines + [f"gateway A/B target: under {target_ms:g} ms added to ITL p50 at C=1: "
                        f"NOT MEASURED (no pair completed on both sides)"]
    a = [direct[k].token_times for k in ok]
    b = [gateway[k].token_times for k in ok]
    d: PairedDiff = itl_diff(a, b)
    lat = added_latency([(direct[k].sent, direct[k].token_times) for k in ok],
                        [(gateway[k].sent, gateway[k].token_times) for k in ok])
    ms = 1e3
    for name, side in zip(SIDES, (direct, gateway)):
        ttft = sorted(side[k].token_times[0] - side[k].sent for k in ok if side[k].token_times)
        tokens = sum(len(side[k].token_times) for k in ok)
        cpu = used.get(name, {})
        cpu_note = ", ".join(f"{k.split('-')[0]} {ms * v / tokens:.2f}" for k, v in sorted(cpu.items())
                             if tokens and (k in ("bench", "gateway-0", "scheduler-0")))
        lines.append(f"  {name:8s} ITL p50 {ms * (d.p50_a if name == 'direct' else d.p50_b):6.2f} ms"
                     f"  TTFT p50 {ms * ttft[len(ttft) // 2]:6.1f} ms  {tokens} tokens"
                     + (f"  cpu ms/token: {cpu_note}" if cpu_note else ""))
    lines.append("  gateway - direct, same greedy tokens on both sides: " + (
        f"first token {ms * lat.first_token:+.2f} ms, whole request {ms * lat.per_token:+.2f} "
        f"ms per token (medians of {lat.pairs}/{len(ok)} pairs)" if lat else "no such pair"))
    lines.append(f"gateway A/B target: under {target_ms:g} ms added to ITL p50 at C=1: "
                 f"{'MET' if ms * d.high < target_ms else 'NOT MET'} ({ms * d.diff:+.2f} ms, "
                 f"95% bootstrap [{ms * d.low:+.2f}, {ms * d.high:+.2f}], halves "
                 f"{ms * d.first_half:+.2f}/{ms * d.second_half:+.2f}, per-pair median "
                 f"{ms * d.per_pair_median:+.2f}; {d.pairs} pairs ABBA)")
    return lines


def bench_ab(args, tok, target_ms: float) -> list[str]:
    """Start the first stack of --shards-list, run --ab-pairs pairs on it, return the lines."""
    from bench.serve import gateway_warm_up
    from bench.serve_cpu import CpuMeter, stack_services
    from bench.serve_stack import LocalStack
    from bench.serve_workload import make_prompts

    shards = args.shards_list[0]
    prompts = make_prompts(tok, args.ab_pairs, args.workload, salt=10_000 + args.ab_pairs)
    with LocalStack(shards, model=args.model, pages=args.pages) as stack:
        print(f"# llmbus {shards}-shard: up in {stack.ready_s:.1f}s at {stack.scheduler}; A/B of "
              f"{len(prompts)} pairs (direct vs gateway), C=1, max_tokens "
              f"{args.workload.max_tokens}, greedy", flush=True)
        warm = make_prompts(tok, 2, Workload(max_tokens=8, requests_per_client=1), salt=-1)
        model = gateway_warm_up(stack, warm)
        # Warm both paths alike before the pairs that count (first connections, code paths).
        asyncio.run(run_pairs(stack.scheduler, stack.http, model, warm, Workload(max_tokens=8)))
        cpu = CpuMeter(stack_services(stack.pid))
        t0 = time.monotonic()
        direct, gateway, used = asyncio.run(run_pairs(stack.scheduler, stack.http, model, prompts,
                                                      args.workload, cpu))
        print(f"# A/B took {time.monotonic() - t0:.0f}s", flush=True)
    if args.ab_save is not None:
        save(args.ab_save, direct, gateway)
    return report(direct, gateway, used, target_ms)


def save(path: Path, direct: list[RequestTiming], gateway: list[RequestTiming]) -> None:
    """Both sides' timings, pair k at index k, as JSON (perf_counter seconds)."""
    path.write_text(json.dumps({name: [dataclasses.asdict(t) for t in side]
                                for name, side in zip(SIDES, (direct, gateway))}))
    print(f"# raw timings in {path}", flush=True)
