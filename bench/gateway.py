"""The gateway's cost: the same stack driven directly (`scheduler.generate` over the bus) and
through the gateway (OpenAI chat completions, streamed over HTTP), in one run.

Prints, per concurrency, both engines' rows, then the added latency per token at concurrency 1
and the throughput ratio at the top concurrency against the targets of issue 12 (under 1 ms
per token; at least 95% of the direct throughput).

    OPENBLAS_NUM_THREADS=1 python3 -m bench.gateway            # a few minutes
    OPENBLAS_NUM_THREADS=1 python3 -m bench.gateway --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from bench.serve import HEADER, _ints, load, row
from bench.serve_workload import Prompt, RequestTiming, Summary, Workload, make_prompts, summarize

ADDED_PER_TOKEN_TARGET_MS = 1.0
THROUGHPUT_TARGET = 0.95


async def run_level_http(base: str, model: str, prompts: list[Prompt], concurrency: int,
                         workload: Workload) -> list[RequestTiming]:
    """Closed-loop clients over HTTP, as bench.serve_client.run_level does over the bus.

    `logprobs` is asked so that each chunk says how many tokens it carries (one entry each):
    the timing per token is then as exact as on the bus, at the price of a little more JSON.
    """
    import aiohttp

    timings: list[RequestTiming] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def one_client(i: int) -> None:
            for p in prompts[i::concurrency]:
                t = RequestTiming(sent=time.perf_counter())
                timings.append(t)
                try:
                    await _one(session, base, model, p, workload, t)
                except Exception as e:  # a refused or failed request is counted, not fatal
                    t.error = f"{type(e).__name__}: {e}"

        await asyncio.gather(*(one_client(i) for i in range(concurrency)))
    return timings


async def _one(session, base: str, model: str, prompt: Prompt, workload: Workload,
               t: RequestTiming) -> None:
    body = {"model": model, "messages": prompt.messages, "max_tokens": workload.max_tokens,
            "temperature": 0.0, "seed": workload.seed, "stream": True, "logprobs": True,
            "stream_options": {"include_usage": True}}
    async with session.post(base + "/v1/chat/completions", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:200]}")
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            if chunk.get("usage"):
                t.prompt_tokens = chunk["usage"]["prompt_tokens"]
            for choice in chunk["choices"]:
                n = len((choice.get("logprobs") or {}).get("content") or ())
                if n:
                    t.tokens(time.perf_counter(), n)
                if choice.get("finish_reason"):
                    t.finish = choice["finish_reason"]


def _marked(prompts: list[Prompt]) -> list[Prompt]:
    """The same prompts one word longer at their start, so that the second run finds none of
    the first run's prompts in the prefix cache (only the template's shared system prompt)."""
    return [Prompt([{**p.messages[0], "content": "Now: " + p.messages[0]["content"]},
                    *p.messages[1:]], p.ids) for p in prompts]


def per_token_ms(s: Summary) -> float:
    """Mean wall time per generated token of one request (TTFT included), in ms."""
    return 1e3 * s.seconds * s.concurrency / s.tokens if s.tokens else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--concurrency", type=_ints, default=[1, 32])
    ap.add_argument("--max-tokens", type=int, default=None, help="tokens per request (default 32)")
    ap.add_argument("--requests-per-client", type=int, default=None, help="default 2")
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="16 tokens, 1 request per client")
    args = ap.parse_args(argv)
    from bench.serve_client import run_level
    from bench.serve_stack import LocalStack, StackFailed
    from services.tokenizer.tokenizer import Tokenizer

    if args.model is None:
        from services.modelstore.pull import pull
        args.model = pull()
    w = Workload(max_tokens=args.max_tokens or (16 if args.quick else 32),
                 requests_per_client=args.requests_per_client or (1 if args.quick else 2),
                 min_prompt=20, max_prompt=300)
    tok = Tokenizer.from_gguf(args.model)
    t0 = time.monotonic()
    print(f"# gateway bench: {args.shards} shards, concurrency {args.concurrency}, "
          f"{w.requests_per_client} requests/client, max_tokens {w.max_tokens}, greedy; "
          f"load {load()}", flush=True)
    results: dict[str, dict[int, Summary]] = {"direct": {}, "gateway": {}}
    try:
        with LocalStack(args.shards, model=args.model,
                        max_queue=max(256, 2 * max(args.concurrency))) as stack:
            import urllib.request
            with urllib.request.urlopen(stack.http + "/v1/models") as r:
                model = json.load(r)["data"][0]["id"]
            warm = make_prompts(tok, 2, Workload(max_tokens=8, requests_per_client=1), salt=-1)
            asyncio.run(run_level(stack.scheduler, warm, 2, Workload(max_tokens=8)))
            asyncio.run(run_level_http(stack.http, model, warm, 2, Workload(max_tokens=8)))
            print(HEADER, flush=True)
            for c in args.concurrency:
                prompts = make_prompts(tok, c * w.requests_per_client, w, salt=c)
                for engine in ("direct", "gateway"):
                    run = (run_level(stack.scheduler, prompts, c, w) if engine == "direct" else
                           run_level_http(stack.http, model, _marked(prompts), c, w))
                    s = results[engine][c] = summarize(c, asyncio.run(run))
                    print(row(f"llmbus {engine}", s, f"{per_token_ms(s):.1f} ms/token"),
                          flush=True)
    except StackFailed as e:
        print(f"error: the stack failed: {e}", file=sys.stderr)
        return 1
    lo, hi = min(args.concurrency), max(args.concurrency)
    added = per_token_ms(results["gateway"][lo]) - per_token_ms(results["direct"][lo])
    itl = 1e3 * (results["gateway"][lo].itl_p50 - results["direct"][lo].itl_p50)
    ratio = results["gateway"][hi].tokens_per_s / results["direct"][hi].tokens_per_s
    print(f"\nadded per token at concurrency {lo}: {added:+.2f} ms mean (ITL p50 {itl:+.2f} ms); "
          f"target < {ADDED_PER_TOKEN_TARGET_MS:g} ms: "
          f"{'met' if added < ADDED_PER_TOKEN_TARGET_MS else 'NOT met'}")
    print(f"throughput through the gateway at concurrency {hi}: {ratio:.1%} of direct; "
          f"target >= {THROUGHPUT_TARGET:.0%}: {'met' if ratio >= THROUGHPUT_TARGET else 'NOT met'}")
    print(f"# load average at end: {load()}; took {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
