"""Serving benchmark: throughput, TTFT and inter-token latency of the whole stack under load.

Starts `llmbus up` with 3 shard processes, then with 1 (one at a time, SIGTERM between), drives
each with closed-loop clients at several concurrencies, and does the same with llama.cpp when
`llama_cpp` (llama-cpp-python) is importable. Prints the pipeline's cost (3-shard / 1-shard
throughput) and where the stack stands against the targets of issue 4.

The first stack is also driven through its gateway (OpenAI chat completions, streamed over
HTTP), each level right after the same level on the bus: the gateway's cost (added time per
token at the lowest concurrency, throughput through it / direct at the highest) against the
targets of issue 12. Each row says how much CPU the bench's clients and the services used.

With --constrained it measures instead what structured output costs: every request free, then
every one constrained to a JSON schema, in interleaved rounds on one stack, and the mask time
per token over SmolLM2's and Gemma 3's vocabularies (bench/serve_constrained.py).

With --curve it measures instead what ZeroMQ CURVE costs: a plain and a keyed stack of the first
--shards-list count, up side by side and driven in turns (bench/serve_curve.py).

`--replicas 1,2` measures each shard count with one and with two processes per range (two
pipelines on this machine's cores) and prints the throughput of two pipelines over one, per
concurrency, side by side in the same run.

Run from the repository root:
    OPENBLAS_NUM_THREADS=1 python3 -m bench.serve            # a few minutes
    OPENBLAS_NUM_THREADS=1 python3 -m bench.serve --quick    # a smoke run
    OPENBLAS_NUM_THREADS=1 python3 -m bench.serve --ab-gateway --shards-list 2   # issue 12's A/B
    python3 -m bench.serve_ab run1.json run2.json ...   # A/B runs saved with --ab-save, pooled
    OPENBLAS_NUM_THREADS=1 python3 -m bench.serve --curve    # keyed / plain throughput
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time
from pathlib import Path

from bench.serve_workload import Summary, Workload, make_prompts, summarize

PIPELINE_TARGET = 0.85   # 3-shard throughput at the top concurrency, as a share of 1-shard
GATEWAY_ADDED_MS_TARGET = 1.0     # added per token through the gateway at the lowest concurrency
GATEWAY_THROUGHPUT_TARGET = 0.95  # throughput through the gateway / direct at the highest


def _ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards-list", type=_ints, default=[3, 1],
                    help="shard-process counts to measure, one stack each (default 3,1)")
    ap.add_argument("--replicas", type=_ints, default=[1],
                    help="shard processes per range to measure, one stack each (e.g. 1,2: one "
                         "pipeline, then two side by side; default 1)")
    ap.add_argument("--concurrency", type=_ints, default=[1, 8, 32],
                    help="closed-loop client counts (default 1,8,32)")
    ap.add_argument("--max-tokens", type=int, default=None, help="tokens per request (default 32)")
    ap.add_argument("--requests-per-client", type=int, default=None,
                    help="requests each client sends per level (default 2)")
    ap.add_argument("--min-prompt", type=int, default=20, help="shortest prompt, tokens")
    ap.add_argument("--max-prompt", type=int, default=300, help="longest prompt, tokens")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 16 tokens, 1 request per client")
    ap.add_argument("--model", type=Path, default=None,
                    help="GGUF file (default: the default model, pulled if missing)")
    ap.add_argument("--pages", type=int, default=None, help="KV pages per shard (llmbus up's default)")
    ap.add_argument("--up-args", default="",
                    help="more `llmbus up` options for every stack, one string "
                         "(e.g. \"--inflight 2 --threads 1\")")
    ap.add_argument("--no-gateway", action="store_true",
                    help="drive the stacks on the bus only (not also through the gateway)")
    ap.add_argument("--no-llamacpp", action="store_true", help="skip llama.cpp even if importable")
    ap.add_argument("--ab-gateway", action="store_true",
                    help="instead of the levels: a paired A/B at C=1 of the first stack on the "
                         "bus and through its gateway (same prompts, interleaved; issue 12)")
    ap.add_argument("--ab-pairs", type=int, default=48,
                    help="prompts in the A/B, each sent once per side (default 48)")
    ap.add_argument("--ab-together", type=int, default=16,
                    help="after the A/B, prompts sent on both sides at once, which measures each "
                         "token's delivery through the gateway (default 16)")
    ap.add_argument("--ab-save", type=Path, default=None,
                    help="write the A/B's raw timings (every token's arrival) to this JSON file")
    ap.add_argument("--constrained", action="store_true",
                    help="what structured output costs: every request free, then every one "
                         "constrained to a JSON schema, interleaved (bench/serve_constrained.py)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="--constrained: interleaved rounds of each kind (more on a loaded machine)")
    ap.add_argument("--mask-models", type=Path, nargs="*", default=None,
                    help="GGUFs whose vocabularies --constrained times masks over (default: "
                         "Gemma 3 270M from the cache, when pulled)")
    ap.add_argument("--curve", action="store_true",
                    help="only the cost of CURVE: a plain and a keyed stack side by side")
    ap.add_argument("--llamacpp-threads", type=int, default=1,
                    help="llama.cpp compute threads (default 1: like one shard's compute "
                         "thread, and its spinning thread barriers collapse on a shared machine)")
    args = ap.parse_args(argv)
    quick = args.quick
    if args.ab_pairs <= 0 or args.ab_together < 0:
        ap.error("--ab-pairs must be > 0 and --ab-together >= 0")
    # The A/B measures gaps between tokens: longer answers give more of them per request.
    default_tokens = 16 if quick else (64 if args.ab_gateway else 32)
    args.workload = Workload(
        max_tokens=args.max_tokens or default_tokens,
        requests_per_client=args.requests_per_client or (1 if quick else 2),
        min_prompt=args.min_prompt, max_prompt=args.max_prompt, seed=args.seed)
    return args


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


HEADER = (f"{'engine':16s} {'C':>3s} {'reqs':>4s} {'err':>3s} {'tok/s':>7s} {'TTFT p50':>9s} "
          f"{'p99':>7s} {'ITL p50':>8s} {'p99':>7s} {'prompt':>6s} {'compl':>5s}  notes")


def row(engine: str, s: Summary, notes: str = "") -> str:
    ms = 1e3
    return (f"{engine:16s} {s.concurrency:3d} {s.requests:4d} {s.errors:3d} {s.tokens_per_s:7.1f} "
            f"{s.ttft_p50 * ms:7.0f}ms {s.ttft_p99 * ms:5.0f}ms {s.itl_p50 * ms:6.1f}ms "
            f"{s.itl_p99 * ms:5.0f}ms {s.mean_prompt:6.0f} {s.mean_completion:5.1f}  {notes}")


def engine_name(shards: int, replicas: int = 1) -> str:
    return f"llmbus {shards}-shard" + (f" x{replicas}" if replicas > 1 else "")


def bench_stack(shards: int, args, tok, prompts: dict, gateway: bool = False,
                engine_steps: dict[int, float] | None = None,
                replicas: int = 1) -> dict[str, dict[int, Summary]]:
    """One stack's rows: on the bus, and (gateway) through its HTTP gateway right after each
    level, on the same stack, so that the two are measured side by side; `engine_steps[c]`, when
    given, gets the shards' own compute per decode-only batch at that level (ms; engine_step_ms)."""
    from bench.serve_client import run_level, scheduler_stats, stats_delta
    from bench.serve_cpu import CpuMeter, stack_services
    from bench.serve_stack import LocalStack

    engine = engine_name(shards, replicas)
    results: dict[str, dict[int, Summary]] = {engine: {}}
    with LocalStack(shards, model=args.model, pages=args.pages,
                    max_queue=max(256, 2 * max(args.concurrency)), replicas=replicas,
                    up_args=tuple(shlex.split(args.up_args))) as stack:
        print(f"# {engine}: up in {stack.ready_s:.1f}s at {stack.scheduler}", flush=True)
        if replicas > 1:   # the stack is up with its first pipeline; the others join as they load
            waited = wait_pipelines(stack.scheduler, replicas)
            print(f"# {engine}: {replicas} pipelines after {waited:.1f}s more", flush=True)
        cpu = CpuMeter(stack_services(stack.pid))
        warm = make_prompts(tok, 2, Workload(max_tokens=8, requests_per_client=1), salt=-1)
        asyncio.run(run_level(stack.scheduler, warm, 2, Workload(max_tokens=8)))
        if gateway:
            model = gateway_warm_up(stack, warm)
            results[f"gateway {shards}-shard"] = {}
        for c in args.concurrency:
            before = asyncio.run(scheduler_stats(stack.scheduler))
            cpu.start()
            timings = asyncio.run(run_level(stack.scheduler, prompts[c], c, args.workload))
            cpu.stop()
            d = stats_delta(before, asyncio.run(scheduler_stats(stack.scheduler)))
            s = results[engine][c] = summarize(c, timings)
            step = engine_step_ms(d)
            if engine_steps is not None and step is not None:
                engine_steps[c] = step
            notes = (f"{d['batches']:.0f} batches, {d['tokens_per_batch']:.1f} tok/batch"
                     + (f", {d['preemptions']:.0f} preempted" if d["preemptions"] else "")
                     + (f", engine step {step:.1f}ms" if step else "")
                     + _finish_note(s) + "; " + cpu.note(s.tokens))
            print(row(engine, s, notes), flush=True)
            _first_error(timings)
            if gateway:
                results[f"gateway {shards}-shard"][c] = gateway_level(stack, model, prompts[c], c,
                                                                      args, cpu)
    return results


def wait_pipelines(endpoint: str, n: int, timeout: float = 180.0) -> float:
    """Seconds until the scheduler runs `n` pipelines; raises StackFailed past `timeout`."""
    from bench.serve_client import scheduler_stats
    from bench.serve_stack import StackFailed

    t0 = time.monotonic()
    while asyncio.run(scheduler_stats(endpoint)).get("pipelines", 1) < n:
        if time.monotonic() - t0 > timeout:
            raise StackFailed(f"the scheduler did not run {n} pipelines within {timeout:.0f}s")
        time.sleep(0.5)
    return time.monotonic() - t0


def _first_error(timings) -> None:
    for t in timings:
        if t.error:
            print(f"  error: {t.error}", flush=True)
            break


def gateway_warm_up(stack, warm) -> str:
    """The gateway's model id, after one small request through it."""
    from bench.serve_http import model_id, run_level_http
    model = asyncio.run(model_id(stack.http))
    asyncio.run(run_level_http(stack.http, model, warm, 2, Workload(max_tokens=8)))
    return model


def gateway_level(stack, model: str, prompts, c: int, args, cpu) -> Summary:
    """One level through the gateway (streamed OpenAI chat), on prompts the bus level did not
    leave in the prefix cache."""
    from bench.serve_http import marked, run_level_http
    cpu.start()
    timings = asyncio.run(run_level_http(stack.http, model, marked(prompts), c, args.workload))
    cpu.stop()
    s = summarize(c, timings)
    print(row(f"gateway {stack.shards}-shard", s,
              f"{per_token_ms(s):.1f} ms/token{_finish_note(s)}; {cpu.note(s.tokens)}"),
          flush=True)
    _first_error(timings)
    return s


def per_token_ms(s: Summary) -> float:
    """Mean wall time per generated token of one request (TTFT included), in ms."""
    return 1e3 * s.seconds * s.concurrency / s.tokens if s.tokens else float("nan")


def gateway_cost(results: dict[str, dict[int, Summary]], args) -> list[str]:
    """The gateway's cost against the targets of issue 12: time added per token at the lowest
    concurrency, and throughput through it as a share of direct at the highest."""
    shards = args.shards_list[0]
    direct, gw = results.get(f"llmbus {shards}-shard", {}), results.get(f"gateway {shards}-shard", {})
    lo, hi = min(args.concurrency), max(args.concurrency)
    out = []
    if lo in direct and lo in gw:
        added = per_token_ms(gw[lo]) - per_token_ms(direct[lo])
        itl = 1e3 * (gw[lo].itl_p50 - direct[lo].itl_p50)
        out.append(f"gateway target 1: under {GATEWAY_ADDED_MS_TARGET:g} ms added per token at "
                   f"C={lo}: {'MET' if added < GATEWAY_ADDED_MS_TARGET else 'NOT MET'} "
                   f"({added:+.2f} ms mean per token, ITL p50 {itl:+.2f} ms)")
    if hi in direct and hi in gw and direct[hi].tokens_per_s:
        r = gw[hi].tokens_per_s / direct[hi].tokens_per_s
        out.append(f"gateway target 2: >= {GATEWAY_THROUGHPUT_TARGET:.0%} of direct throughput at "
                   f"C={hi}: {'MET' if r >= GATEWAY_THROUGHPUT_TARGET else 'NOT MET'} "
                   f"({r:.1%}: {gw[hi].tokens_per_s:.1f} vs {direct[hi].tokens_per_s:.1f} tok/s)")
    return out


def bench_llamacpp(args, prompts: dict, eog: frozenset[int]) -> dict[int, Summary]:
    """llama.cpp in a child process, so that a crash in native code is reported, not fatal.

    A SIGILL is retried once without llama.cpp's extra buffer types (AMX kernels fault on a VM
    that advertises AMX without granting its tile state).
    """
    import multiprocessing as mp
    import queue as queues
    import signal

    spawn = mp.get_context("spawn")
    for extra_bufts in (True, False):
        queue = spawn.Queue()
        child = spawn.Process(target=_llamacpp_child, args=(args, prompts, eog, extra_bufts, queue))
        child.start()
        results: dict[int, Summary] = {}
        while child.is_alive() or not queue.empty():
            try:
                c, s = queue.get(timeout=0.5)
            except queues.Empty:
                continue
            if c is None:
                break
            results[c] = s
        child.join()
        if child.exitcode == -signal.SIGILL and extra_bufts:
            print("# llama.cpp died of SIGILL (illegal instruction); again without its extra "
                  "buffer types (AMX/repacked weights)", flush=True)
            continue
        if child.exitcode != 0:
            print(f"error: llama.cpp exited with status {child.exitcode}", file=sys.stderr,
                  flush=True)
        return results
    return {}


def _llamacpp_child(args, prompts: dict, eog: frozenset[int], extra_bufts: bool, queue) -> None:
    from bench.serve_llamacpp import LlamaCppEngine

    engine = LlamaCppEngine(args.model, max_seqs=max(args.concurrency),
                            seq_ctx=args.max_prompt + args.workload.max_tokens + 64,
                            threads=args.llamacpp_threads, eog=eog, extra_bufts=extra_bufts)
    try:
        print(f"# llama.cpp {engine.version}: {args.llamacpp_threads} thread(s), batched decode "
              f"(one context, up to {max(args.concurrency)} sequences)"
              + ("" if extra_bufts else ", no extra buffer types"), flush=True)
        engine.run(prompts[min(args.concurrency)][:1], 1, Workload(max_tokens=8))   # warm-up
        for c in args.concurrency:
            s = summarize(c, engine.run(prompts[c], c, args.workload))
            print(row("llama.cpp", s, _finish_note(s).lstrip(", ")), flush=True)
            queue.put((c, s))
    finally:
        engine.close()
        queue.put((None, None))


def _finish_note(s: Summary) -> str:
    other = {k: v for k, v in s.finishes.items() if k != "length"}
    return (", ends: " + " ".join(f"{k}={v}" for k, v in sorted(other.items()))) if other else ""


def verdict(results: dict[str, dict[int, Summary]], args) -> list[str]:
    """The pipeline's cost at each concurrency and the two targets of issue 4."""
    out = []
    many, one = max(args.shards_list), min(args.shards_list)
    a, b = results.get(f"llmbus {many}-shard", {}), results.get(f"llmbus {one}-shard", {})
    top = max(args.concurrency)
    if many != one and a and b:
        ratios = [f"C={c}: {a[c].tokens_per_s / b[c].tokens_per_s:.2f}"
                  for c in args.concurrency if c in a and c in b and b[c].tokens_per_s]
        out.append(f"pipeline cost ({many}-shard / {one}-shard throughput): " + ", ".join(ratios))
        if top in a and top in b:
            r = a[top].tokens_per_s / b[top].tokens_per_s
            out.append(f"target 1: {many}-shard keeps >= {PIPELINE_TARGET:.0%} of {one}-shard "
                       f"throughput at C={top}: {'MET' if r >= PIPELINE_TARGET else 'NOT MET'} "
                       f"({r:.0%}: {a[top].tokens_per_s:.1f} vs {b[top].tokens_per_s:.1f} tok/s)")
    lc = results.get("llama.cpp", {})
    if top in a and top in lc:
        r = a[top].tokens_per_s / lc[top].tokens_per_s
        out.append(f"target 2: {many}-shard beats llama.cpp at C={top}: "
                   f"{'MET' if r > 1 else 'NOT MET'} ({r:.2f}x: {a[top].tokens_per_s:.1f} vs "
                   f"{lc[top].tokens_per_s:.1f} tok/s)")
    elif top in a:
        out.append("target 2 (beat llama.cpp at C=%d): not measured (%s)"
                   % (top, "--no-llamacpp" if args.no_llamacpp else "llama_cpp not importable"))
    return out


STEP_ALLOWANCE_MS = 2.0      # issue 15: ITL p50 at C=1 within this of the engine's own step...
HOP_ALLOWANCE_MS = 1.0       # ... plus this per hop between shards
ITL_P99_TARGET_S = 0.300     # issue 15: inter-token latency p99 at C=8


def replica_gain(results: dict[str, dict[int, Summary]], args) -> list[str]:
    """Throughput of R pipelines (R processes per range) over one, per concurrency: measured
    side by side in this run, on the same prompts."""
    out = []
    for n in args.shards_list:
        one = results.get(engine_name(n), {})
        for r in args.replicas:
            many = results.get(engine_name(n, r), {})
            if r == 1 or not one or not many:
                continue
            ratios = [f"C={c}: {many[c].tokens_per_s:.1f} / {one[c].tokens_per_s:.1f} tok/s = "
                      f"{many[c].tokens_per_s / one[c].tokens_per_s:.2f}x"
                      for c in args.concurrency if c in one and c in many and one[c].tokens_per_s]
            out.append(f"{n}-shard, {r} pipelines over 1: " + "; ".join(ratios))
    return out


def engine_step_ms(delta: dict[str, float]) -> float | None:
    """The shards' own compute (forward and sampling, summed over the pipeline) per batch that
    held only decodes, from a `scheduler.stats` delta; None when no such batch ran."""
    n = delta.get("driver.decode_batches", 0.0)
    return delta["driver.decode_compute_ms"] / n if n else None


def stack_cost_verdict(results: dict[str, dict[int, Summary]],
                       engine_steps: dict[str, dict[int, float]], args) -> list[str]:
    """Issue 15's serving targets: the stack's cost per token at C=1 against the engine's own
    step measured in the same run, and the pace of streams under load (ITL p99 at C=8)."""
    out = []
    for n in args.shards_list:
        engine = f"llmbus {n}-shard"
        res, steps = results.get(engine, {}), engine_steps.get(engine, {})
        if 1 in res and 1 in steps:
            hops = n - 1
            allowed = steps[1] + STEP_ALLOWANCE_MS + HOP_ALLOWANCE_MS * hops
            itl = res[1].itl_p50 * 1e3
            out.append(f"{engine} C=1: ITL p50 {itl:.1f} ms vs engine step {steps[1]:.1f} ms + "
                       f"{STEP_ALLOWANCE_MS:g} ms + {HOP_ALLOWANCE_MS:g} ms/hop x {hops} = "
                       f"{allowed:.1f} ms: {'MET' if itl <= allowed else 'NOT MET'} "
                       f"(stack cost {itl - steps[1]:+.1f} ms/token)")
        if 8 in res:
            p99 = res[8].itl_p99
            out.append(f"{engine} C=8: ITL p99 {p99 * 1e3:.0f} ms vs {ITL_P99_TARGET_S * 1e3:.0f} ms: "
                       f"{'MET' if p99 <= ITL_P99_TARGET_S else 'NOT MET'}")
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    from bench.serve_stack import StackFailed
    from services.tokenizer.tokenizer import Tokenizer

    if args.model is None:
        from services.modelstore.pull import pull
        args.model = pull()
    if not args.model.is_file():
        print(f"no model at {args.model} (run `llmbus pull` or pass --model)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    w = args.workload
    print(f"# serve bench: model {args.model.name}, shards {args.shards_list}, concurrency "
          f"{args.concurrency}, {w.requests_per_client} requests/client, max_tokens {w.max_tokens}, "
          f"greedy, prompts {w.min_prompt}-{w.max_prompt} tokens (seed {w.seed})")
    print(f"# load average at start (1/5/15 min): {load()} on {os.cpu_count()} cores", flush=True)
    try:
        tok = Tokenizer.from_gguf(args.model)
    except (ValueError, OSError) as e:   # TokenizerError, BadModelFile
        print(f"cannot read the tokenizer of {args.model}: {e}", file=sys.stderr)
        return 2
    if args.ab_gateway:
        from bench.serve_ab import bench_ab
        try:
            lines = bench_ab(args, tok, GATEWAY_ADDED_MS_TARGET)
        except StackFailed as e:
            print(f"error: the {args.shards_list[0]}-shard stack failed: {e}", file=sys.stderr)
            return 1
        print("\n".join(lines))
        print(f"# load average at end: {load()}; took {time.monotonic() - t0:.0f}s")
        return 0
    prompts = {c: make_prompts(tok, c * w.requests_per_client, w, salt=c) for c in args.concurrency}
    results: dict[str, dict[int, Summary]] = {}
    print(HEADER, flush=True)
    if args.constrained:
        from bench.serve_constrained import bench_constrained
        if args.mask_models is None:
            from services.modelstore.pull import GEMMA3_270M, is_pulled, model_path
            args.mask_models = [model_path(GEMMA3_270M)] if is_pulled(GEMMA3_270M) else []
        lines = bench_constrained(args, tok, row)
        print()
        print("\n".join(lines))
        print(f"# load average at end: {load()}; took {time.monotonic() - t0:.0f}s")
        return 0
    if args.curve:
        from bench.serve_curve import bench_curve
        lines = bench_curve(args, tok, prompts, row)
        print()
        print("\n".join(lines))
        print(f"# load average at end: {load()}; took {time.monotonic() - t0:.0f}s")
        return 0
    failed = False
    engine_steps: dict[str, dict[int, float]] = {}
    for i, n in enumerate(args.shards_list):
        for r in args.replicas:
            try:
                results.update(bench_stack(
                    n, args, tok, prompts, gateway=i == 0 and r == 1 and not args.no_gateway,
                    engine_steps=engine_steps.setdefault(engine_name(n, r), {}), replicas=r))
            except StackFailed as e:
                print(f"error: the {engine_name(n, r)} stack failed: {e}", file=sys.stderr,
                      flush=True)
                failed = True
    if not args.no_llamacpp and _llamacpp_importable():
        results["llama.cpp"] = bench_llamacpp(args, prompts, tok.eot_ids)
    print()
    for line in (verdict(results, args) + replica_gain(results, args) + gateway_cost(results, args)
                 + stack_cost_verdict(results, engine_steps, args)):
        print(line)
    print(f"# load average at end: {load()}; took {time.monotonic() - t0:.0f}s")
    return 1 if failed else 0


def _llamacpp_importable() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
