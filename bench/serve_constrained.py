"""What structured output costs (`python -m bench.serve --constrained`): one `llmbus up` stack
driven in interleaved rounds with every request free and every request constrained to a JSON
schema, at concurrency 16 (throughput) and 1 (inter-token latency), side by side in the same
run; then the mask time per token, p50 and p99, of the scheduler's matcher over SmolLM2's
vocabulary (as the stack measured it) and Gemma 3's (a walk through a schema's answers, the
same code, in this process).

The schema leaves one string open, so that a constrained answer runs to max_tokens as a free
one does: both rounds compute the same number of tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import shlex
import time

import numpy as np

from bench.serve_workload import Summary, Workload, make_prompts, summarize

SCHEMA = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40},
                                           "summary": {"type": "string"}},
          "required": ["title", "summary"], "additionalProperties": False}
FORMAT = {"type": "json_schema", "schema": SCHEMA}
THROUGHPUT_TARGET = 0.90       # constrained / free tokens per second at concurrency 16
ITL_ADDED_MS_TARGET = 1.0      # constrained - free inter-token p50 at concurrency 1


def bench_constrained(args, tok, row) -> list[str]:
    """Rows as they are measured (printed), and the verdict lines (returned)."""
    from bench.serve_client import run_level, scheduler_stats
    from bench.serve_stack import LocalStack

    shards, rounds = args.shards_list[0], args.rounds
    free = dataclasses.replace(args.workload, max_tokens=max(args.workload.max_tokens, 48))
    constrained = dataclasses.replace(free, format=FORMAT)
    levels = (16, 1)
    # Each round and kind its own prompts (of the same lengths' distribution): a kind that ran
    # the other's prompts after it would find their prefixes in the KV cache.
    prompts = {(n, r, c): make_prompts(tok, c * free.requests_per_client, free,
                                       salt=c + 1000 * r + (500 if n == "json" else 0))
               for n in ("free", "json") for r in range(rounds) for c in levels}
    got: dict[tuple[str, int], list[Summary]] = {}
    with LocalStack(shards, model=args.model, pages=args.pages, max_queue=256,
                    up_args=tuple(shlex.split(args.up_args))) as stack:
        print(f"# llmbus {shards}-shard: up in {stack.ready_s:.1f}s", flush=True)
        warm = make_prompts(tok, 2, Workload(max_tokens=8, requests_per_client=1), salt=-1)
        asyncio.run(run_level(stack.scheduler, warm, 2, dataclasses.replace(constrained, max_tokens=8)))
        for r in range(rounds):
            for c in levels:
                # Free then constrained, then the other way round: drift in the machine's load
                # falls on both alike.
                for name, w in ((("free", free), ("json", constrained)) if r % 2 == 0 else
                                (("json", constrained), ("free", free))):
                    s = summarize(c, asyncio.run(run_level(stack.scheduler, prompts[(name, r, c)],
                                                           c, w)))
                    got.setdefault((name, c), []).append(s)
                    print(row(f"{name} round {r + 1}", s, f"finishes {s.finishes}"), flush=True)
        stats = asyncio.run(scheduler_stats(stack.scheduler))
    tput = {n: float(np.mean([s.tokens_per_s for s in got[(n, 16)]])) for n in ("free", "json")}
    itl = {n: float(np.median([s.itl_p50 for s in got[(n, 1)]])) * 1e3 for n in ("free", "json")}
    share, added = tput["json"] / tput["free"], itl["json"] - itl["free"]
    lines = [
        f"throughput at C=16: constrained {tput['json']:.1f} tok/s, free {tput['free']:.1f} "
        f"tok/s: {share:.2f} ({'MET' if share >= THROUGHPUT_TARGET else 'NOT MET'}: target "
        f">= {THROUGHPUT_TARGET:.2f})",
        f"inter-token p50 at C=1: constrained {itl['json']:.1f} ms, free {itl['free']:.1f} ms: "
        f"{added:+.2f} ms ({'MET' if added <= ITL_ADDED_MS_TARGET else 'NOT MET'}: target "
        f"<= +{ITL_ADDED_MS_TARGET:.0f} ms)",
        f"mask per token, {tok.vocab_size} tokens (SmolLM2, in the stack): p50 "
        f"{stats.get('grammar_mask_us_p50', float('nan')):.0f} us, p99 "
        f"{stats.get('grammar_mask_us_p99', float('nan')):.0f} us over the last "
        f"{stats.get('grammar_masks', 0):.0f} masks; "
        f"{stats.get('driver.grammar_forced', 0):.0f} tokens forced "
        f"(taken without a draw, in the constrained tok/s)"]
    for path in args.mask_models:
        lines.append(mask_walk(path))
    return lines


def mask_walk(path, answers: int = 20, steps: int = 64, seed: int = 0) -> str:
    """Mask time per token over a model's vocabulary: `answers` random walks through SCHEMA's
    answers (each step draws one token the mask allows), timed by the scheduler's own matcher."""
    from services.scheduler.grammar.matcher import Grammars
    from services.tokenizer.token_bytes import token_bytes_table
    from services.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(path)
    table = token_bytes_table(tok.vocab)
    t0 = time.perf_counter()
    grammars = Grammars(table, [i for i, b in enumerate(table) if not b], sorted(tok.eot_ids))
    built = time.perf_counter() - t0
    rng = random.Random(seed)
    cpu: list[float] = []      # this thread's CPU time per mask: wall time less preemption
    for _ in range(answers):
        c, gen = grammars.compile(FORMAT), []
        for _ in range(steps):
            t = time.thread_time()
            words = c.mask(gen)
            cpu.append((time.thread_time() - t) * 1e6)
            ids = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))
            ids = [t for t in ids.tolist() if t < len(table) and t not in tok.eot_ids] or None
            if ids is None:
                break
            gen.append(rng.choice(ids))
    s = grammars.mask_stats()
    return (f"mask per token, {len(table)} tokens ({path.name}, {answers} walks of up to {steps} "
            f"tokens): p50 {s['grammar_mask_us_p50']:.0f} us, p99 {s['grammar_mask_us_p99']:.0f} "
            f"us wall; CPU p50 {np.percentile(cpu, 50):.0f} us, p99 {np.percentile(cpu, 99):.0f} "
            f"us (index built in {built:.1f} s at the scheduler's start)")
