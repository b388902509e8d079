"""The gateway's cost per token as a fair A/B at concurrency 1: each prompt is sent once on the
bus (a direct client of the scheduler) and once through the gateway (streamed OpenAI chat over
HTTP), one request at a time, the two sides interleaved (ABBA), on one stack.

Before each pair, a 1-token request on the same prompt puts its prefix in the scheduler's
prefix cache, so that both sides of the pair find the same cached pages: greedy decoding then
does the same computation on both sides, and what differs is the path from the scheduler to the
client. Issue 12's target: the gateway adds under 1 ms to inter-token latency p50.

Then a few prompts go to both sides at once: the two requests share every decode step, so each
token's arrival through the gateway minus its arrival on the bus is the gateway's delivery delay
per token, measured at the same moment on both sides whatever else the machine is doing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from bench.paired import PairedDiff, abba, added_latency, delivery_delays, itl_diff, verdict
from bench.serve_workload import Prompt, RequestTiming, Workload

SIDES = ("direct", "gateway")


class Clients:
    """One bus client of the scheduler and one kept-alive HTTP connection to the gateway (as a
    chat client holds one: a new TCP connection per request would be the client's cost)."""

    def __init__(self, scheduler: str, http: str, model: str):
        import aiohttp
        import zmq.asyncio

        from bus.client import RpcClient

        self.http, self.model = http, model
        self.bus = RpcClient(zmq.asyncio.Context.instance(), scheduler, sender="bench-ab")
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=2),
                                             timeout=aiohttp.ClientTimeout(total=600))

    async def one(self, side: int, p: Prompt, w: Workload) -> RequestTiming:
        """One request on side 0 (the bus) or 1 (the gateway); a failure is kept in its timing."""
        from bench.serve_client import one_request as bus_request
        from bench.serve_http import one_request as http_request

        t = RequestTiming(sent=time.perf_counter())
        try:
            if side == 0:
                await bus_request(self.bus, p, w, t)
            else:
                await http_request(self.session, self.http, self.model, p, w, t)
        except Exception as e:  # a failed request loses its pair, it does not end the run
            t.error = f"{type(e).__name__}: {e}"
        return t

    async def warm(self, p: Prompt, seed: int) -> None:
        """Put the prompt's prefix in the scheduler's prefix cache (a 1-token request)."""
        await self.one(0, p, Workload(max_tokens=1, seed=seed))

    async def close(self) -> None:
        await self.session.close()
        await self.bus.close()


async def run_pairs(clients: Clients, prompts: list[Prompt], workload: Workload,
                    cpu=None) -> tuple[list[RequestTiming], list[RequestTiming],
                                       dict[str, dict[str, float]]]:
    """Pair k is prompts[k] on both sides, one request at a time, in abba order; returns each
    side's timings (pair k at index k) and, with a CpuMeter, the CPU seconds each process used
    on each side."""
    sides: tuple[list[RequestTiming], list[RequestTiming]] = ([], [])
    used: dict[str, dict[str, float]] = {s: {} for s in SIDES}
    for p, order in zip(prompts, abba(len(prompts))):
        await clients.warm(p, workload.seed)    # both sides of the pair find the same pages
        got: dict[int, RequestTiming] = {}
        for side in order:
            if cpu is not None:
                cpu.start()
            got[side] = await clients.one(side, p, workload)
            if cpu is not None:
                for k, v in cpu.stop().items():
                    used[SIDES[side]][k] = used[SIDES[side]].get(k, 0.0) + v
        sides[0].append(got[0])
        sides[1].append(got[1])
    return sides[0], sides[1], used


async def run_together(clients: Clients, prompts: list[Prompt],
                       workload: Workload) -> list[tuple[RequestTiming, RequestTiming]]:
    """Each prompt on both sides at once, so that the two decode in the same batches: each
    step's token leaves the scheduler for both at the same moment (see paired.delivery_delays)."""
    out = []
    for k, p in enumerate(prompts):
        await clients.warm(p, workload.seed)
        first, second = abba(k + 1)[k]
        got = await asyncio.gather(clients.one(first, p, workload), clients.one(second, p, workload))
        out.append((got[0], got[1]) if first == 0 else (got[1], got[0]))
    return out


def report(direct: list[RequestTiming], gateway: list[RequestTiming],
           used: dict[str, dict[str, float]], together: list[tuple[RequestTiming, RequestTiming]],
           target_ms: float) -> list[str]:
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
    lines.append(together_line(together))
    lines.append(f"gateway A/B target: under {target_ms:g} ms added to ITL p50 at C=1: "
                 f"{verdict(d, target_ms / ms)} ({ms * d.diff:+.2f} ms, "
                 f"95% bootstrap [{ms * d.low:+.2f}, {ms * d.high:+.2f}], halves "
                 f"{ms * d.first_half:+.2f}/{ms * d.second_half:+.2f}, per-pair median "
                 f"{ms * d.per_pair_median:+.2f}; {d.pairs} pairs ABBA)")
    return lines


def together_line(runs: list[tuple[RequestTiming, RequestTiming]]) -> str:
    """Per-token delivery through the gateway, from the runs where both sides shared batches."""
    delays = [delivery_delays(a.token_times, b.token_times) for a, b in runs
              if not a.error and not b.error]
    x = np.concatenate(delays) if delays else np.zeros(0, dtype=np.float64)
    if not x.size:
        return "  per-token delivery: not measured (no run completed on both sides)"
    ms = 1e3
    return (f"  per-token delivery, both sides in the same batches ({len(delays)} prompts, "
            f"{x.size} tokens): gateway later by {ms * np.median(x):+.2f} ms median "
            f"(p10 {ms * np.percentile(x, 10):+.2f}, p90 {ms * np.percentile(x, 90):+.2f}; "
            f"halves {ms * np.median(np.concatenate(delays[:len(delays) // 2] or [x])):+.2f}/"
            f"{ms * np.median(np.concatenate(delays[len(delays) // 2:])):+.2f})")


def bench_ab(args, tok, target_ms: float) -> list[str]:
    """Start the first stack of --shards-list, run --ab-pairs pairs on it one request at a time
    and --ab-together prompts on both sides at once; return the report's lines."""
    from bench.serve import gateway_warm_up
    from bench.serve_cpu import CpuMeter, stack_services
    from bench.serve_stack import LocalStack
    from bench.serve_workload import make_prompts

    shards = args.shards_list[0]
    prompts = make_prompts(tok, args.ab_pairs + args.ab_together, args.workload,
                           salt=10_000 + args.ab_pairs)
    pairs, together = prompts[:args.ab_pairs], prompts[args.ab_pairs:]
    with LocalStack(shards, model=args.model, pages=args.pages) as stack:
        print(f"# llmbus {shards}-shard: up in {stack.ready_s:.1f}s at {stack.scheduler}; A/B of "
              f"{len(pairs)} pairs (direct vs gateway) at C=1, then {len(together)} prompts on "
              f"both at once; max_tokens {args.workload.max_tokens}, greedy", flush=True)
        warm = make_prompts(tok, 2, Workload(max_tokens=8, requests_per_client=1), salt=-1)
        model = gateway_warm_up(stack, warm)
        cpu = CpuMeter(stack_services(stack.pid))

        async def run():
            clients = Clients(stack.scheduler, stack.http, model)
            try:
                # Both paths warmed alike before the pairs that count (connections, code paths).
                await run_pairs(clients, warm, Workload(max_tokens=8))
                t0 = time.monotonic()
                direct, gateway, used = await run_pairs(clients, pairs, args.workload, cpu)
                print(f"# A/B took {time.monotonic() - t0:.0f}s", flush=True)
                return direct, gateway, used, await run_together(clients, together, args.workload)
            finally:
                await clients.close()

        direct, gateway, used, both = asyncio.run(run())
    if args.ab_save is not None:
        save(args.ab_save, direct, gateway, both)
    return report(direct, gateway, used, both, target_ms)


def save(path: Path, direct: list[RequestTiming], gateway: list[RequestTiming],
         together: list[tuple[RequestTiming, RequestTiming]]) -> None:
    """Every timing, pair k at index k, as JSON (perf_counter seconds)."""
    path.write_text(json.dumps({
        **{name: [dataclasses.asdict(t) for t in side] for name, side in zip(SIDES, (direct, gateway))},
        "together": [[dataclasses.asdict(a), dataclasses.asdict(b)] for a, b in together]}))
    print(f"# raw timings in {path}", flush=True)


def load(path: Path) -> tuple[list[RequestTiming], list[RequestTiming],
                              list[tuple[RequestTiming, RequestTiming]]]:
    """What `save` wrote."""
    raw = json.loads(path.read_text())
    side = [[RequestTiming(**t) for t in raw[name]] for name in SIDES]
    return side[0], side[1], [(RequestTiming(**a), RequestTiming(**b)) for a, b in raw["together"]]


def main(argv=None) -> int:
    """Pool A/B runs saved with --ab-save (each pair stays a pair) and print the same report:
    on a busy machine one run's interval is wide, several runs' pairs narrow it."""
    import argparse
    import sys

    from bench.serve import GATEWAY_ADDED_MS_TARGET

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="JSON files written by --ab-save")
    args = ap.parse_args(argv)
    direct, gateway, together = [], [], []
    for path in args.runs:
        try:
            d, g, t = load(path)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"cannot read A/B timings from {path}: {e}", file=sys.stderr)
            return 2
        direct += d
        gateway += g
        together += t
    print(f"# {len(args.runs)} run(s) pooled: {len(direct)} pairs, {len(together)} prompts together")
    print("\n".join(report(direct, gateway, {}, together, GATEWAY_ADDED_MS_TARGET)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
