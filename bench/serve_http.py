"""Closed-loop load through the gateway: C clients streaming OpenAI chat completions over
HTTP (one aiohttp session), timing every token as it arrives, as bench.serve_client does on
the bus.

The client is kept cheap, so that the ratio against direct bus clients measures the gateway
and not this process: no logprobs are asked (the bus client gets ids for free; the gateway
would build per-token JSON for them), and a chunk is parsed only as far as needed.
"""

from __future__ import annotations

import asyncio
import json
import time

from bench.serve_workload import Prompt, RequestTiming, Workload

_CONTENT = b'"delta":{"content":'
_FINISH = b'"finish_reason":"'


async def run_level_http(base: str, model: str, prompts: list[Prompt], concurrency: int,
                         workload: Workload) -> list[RequestTiming]:
    """Client i sends prompts i, i+C, i+2C...; returns the timings of every request."""
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
                    await one_request(session, base, model, p, workload, t)
                except Exception as e:  # a refused or failed request is counted, not fatal
                    t.error = f"{type(e).__name__}: {e}"

        await asyncio.gather(*(one_client(i) for i in range(concurrency)))
    return timings


async def one_request(session, base: str, model: str, prompt: Prompt, workload: Workload,
                      t: RequestTiming, extra: dict | None = None) -> None:
    """One greedy streamed chat request through the gateway, its tokens timed into `t`; `extra`
    adds fields to the body (e.g. llama-server's own)."""
    body = {"model": model, "messages": prompt.messages, "max_tokens": workload.max_tokens,
            "temperature": 0.0, "seed": workload.seed, "stream": True,
            "stream_options": {"include_usage": True}, **(extra or {})}
    async with session.post(base + "/v1/chat/completions", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:200]}")
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            if _CONTENT in line:
                # A content chunk carries the text of one scheduler event: one token, except
                # where several were sampled before the gateway read them (fixed up below).
                t.tokens(time.perf_counter(), 1)
            elif _FINISH in line:
                t.finish = line.split(_FINISH, 1)[1].split(b'"', 1)[0].decode()
            elif b'"usage":{' in line:
                usage = json.loads(line[6:])["usage"]
                t.prompt_tokens = usage["prompt_tokens"]
                missing = usage["completion_tokens"] - len(t.token_times)
                if missing > 0 and t.token_times:   # tokens whose text came in one chunk
                    t.tokens(t.token_times[-1], missing)
            elif b'"error":' in line:
                raise RuntimeError(json.loads(line[6:])["error"]["message"])


async def model_id(base: str) -> str:
    """The id the gateway serves (`GET /v1/models`)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/v1/models") as r:
            return (await r.json())["data"][0]["id"]


def marked(prompts: list[Prompt]) -> list[Prompt]:
    """The same prompts one word longer at their start, so that a second run finds none of
    the first run's prompts in the prefix cache (only the template's shared system prompt)."""
    return [Prompt([{**p.messages[0], "content": "Now: " + p.messages[0]["content"]},
                    *p.messages[1:]], p.ids) for p in prompts]
