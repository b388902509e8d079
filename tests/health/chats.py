"""Streamed chats through a gateway as a client sees them (text, each token, when each came),
for the tests that disturb a stack under them and compare each answer with its undisturbed one."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import aiohttp

from .chaos_watch import Flow

TOPICS = ["the sea", "a mountain village", "winter in a city", "an old library", "a desert road",
          "a rainy harbour", "a garden at night", "a train journey", "a market at dawn",
          "a lighthouse", "a river in autumn", "a snowy forest"]


@dataclass
class Chat:
    """One streamed chat as its client saw it: text, the token of each logprob entry, times."""
    text: str = ""
    tokens: list[str] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    finish: str | None = None
    completion_tokens: int | None = None
    error: dict | None = None

    def longest_pause(self) -> float:
        return max((b - a for a, b in zip(self.arrivals, self.arrivals[1:])), default=0.0)


async def chat(http: str, model: str, i: int, sampling: dict, max_tokens: int,
               flow: Flow | None = None) -> Chat:
    """Chat `i` (a description of TOPICS[i]) streamed from the gateway at `http`."""
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "logprobs": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"Write a long, detailed description of "
                                                     f"{TOPICS[i]}."}], **sampling}
    out = Chat()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as s:
        async with s.post(http + "/v1/chat/completions", json=body) as r:
            assert r.status == 200, await r.text()
            async for line in r.content:
                if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    out.error = ev["error"]
                    continue
                if ev.get("usage"):
                    out.completion_tokens = ev["usage"]["completion_tokens"]
                for choice in ev["choices"]:
                    lp = (choice.get("logprobs") or {}).get("content") or []
                    if lp:
                        out.tokens += [t["token"] for t in lp]
                        out.arrivals.append(time.monotonic())
                        if flow is not None:
                            flow.saw(i)(len(out.tokens))
                    out.text += choice["delta"].get("content") or ""
                    out.finish = choice.get("finish_reason") or out.finish
    return out


async def model_id(http: str) -> str | None:
    """The gateway's model id, None while it has none (no tokenizer has answered it yet)."""
    async with aiohttp.ClientSession() as s, s.get(http + "/v1/models") as r:
        return (await r.json())["data"][0]["id"] if r.status == 200 else None


def assert_undisturbed(got: Chat, want: Chat, what: str) -> None:
    """`got` is its undisturbed answer `want`: no error, every token once and in order, the same
    text, finish and count."""
    assert got.error is None, (what, got.error)
    assert got.finish == want.finish and got.completion_tokens == want.completion_tokens, what
    assert got.tokens == want.tokens and got.text == want.text, what
    assert len(got.tokens) == got.completion_tokens, what
