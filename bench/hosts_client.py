"""The client host of the multi-host benches: run inside its network namespace, it talks to an
OpenAI-style HTTP server (llmbus's gateway or llama.cpp's llama-server) and prints one JSON line.

    python3 -m bench.hosts_client URL first-answer --since T0   # first whole answer, seconds after T0
    python3 -m bench.hosts_client URL load --concurrency 8 --max-tokens 32

`first-answer` polls /health until it answers 200, then asks one short greedy chat; `since` is a
time.monotonic() of the caller (one clock for every process of the machine). `load` starts C
streamed greedy chats at once, each a prompt of its own, and times every token as it arrives.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hosts_load import decode_rates, prompts  # noqa: E402
from bench.serve_http import model_id, one_request  # noqa: E402
from bench.serve_workload import RequestTiming, Workload  # noqa: E402


async def first_answer(base: str, since: float, timeout: float) -> dict:
    import aiohttp

    deadline = time.monotonic() + timeout
    healthy = None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        while time.monotonic() < deadline:
            try:
                async with s.get(base + "/health") as r:
                    if r.status == 200:
                        healthy = healthy or time.monotonic()
                        model = await model_id(base)
                        body = {"model": model, "max_tokens": 4, "temperature": 0.0,
                                "messages": [{"role": "user", "content": "Hello there."}]}
                        async with s.post(base + "/v1/chat/completions", json=body) as a:
                            if a.status == 200:
                                got = await a.json()
                                return {"healthy_s": healthy - since, "answer_s": time.monotonic() - since,
                                        "model": model, "usage": got.get("usage")}
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.25)
    raise SystemExit(f"no answer from {base} within {timeout:g} s")


async def load(base: str, concurrency: int, max_tokens: int, extra: dict) -> dict:
    import aiohttp

    model = await model_id(base)
    work = Workload(max_tokens=max_tokens, requests_per_client=1)
    timings = [RequestTiming(sent=0.0) for _ in range(concurrency)]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency),
                                     timeout=aiohttp.ClientTimeout(total=1800)) as s:
        async def one(i: int, p) -> None:
            timings[i].sent = time.perf_counter()
            try:
                await one_request(s, base, model, p, work, timings[i], extra)
            except Exception as e:     # counted, not fatal: the summary says how many failed
                timings[i].error = f"{type(e).__name__}: {e}"

        await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts(concurrency))))
    return {"concurrency": concurrency, "max_tokens": max_tokens, **decode_rates(timings)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="http://HOST:PORT")
    sub = ap.add_subparsers(dest="what", required=True)
    f = sub.add_parser("first-answer")
    f.add_argument("--since", type=float, required=True)
    f.add_argument("--timeout", type=float, default=1200.0)
    ld = sub.add_parser("load")
    ld.add_argument("--concurrency", type=int, default=1)
    ld.add_argument("--max-tokens", type=int, default=32)
    ld.add_argument("--extra", default="{}", help="JSON fields added to every request body")
    args = ap.parse_args()
    if args.what == "first-answer":
        out = asyncio.run(first_answer(args.base, args.since, args.timeout))
    else:
        out = asyncio.run(load(args.base, args.concurrency, args.max_tokens, json.loads(args.extra)))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
