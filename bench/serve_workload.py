"""The serving benchmark's workload and its arithmetic: fixed-seed chat prompts, per-request
timings, and the summary (throughput, TTFT and inter-token latency percentiles) of one run.

Pure: no sockets, no processes; every engine measured (the llmbus stack, llama.cpp) gets the
same prompts and is summarized by the same code.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

# Words of ordinary English, so that prompts tokenize like text (about one token a word).
_WORDS = (
    "the river mountain village morning market teacher garden letter window history music "
    "engine bridge winter harvest journey library forest ocean station kitchen painting "
    "science number question answer city road summer light shadow friend family weather "
    "machine language story evening travel museum island coffee bread paper computer network "
    "field animal doctor school water stone silver castle planet signal harbor festival"
).split()
_ASKS = (
    "Summarize these notes in two sentences:",
    "Write a short story that uses these words:",
    "Explain how these things could be related:",
    "Turn this list into a friendly paragraph:",
    "What question would connect all of these?",
)


@dataclass(frozen=True)
class Workload:
    """What every engine is asked: closed-loop clients, each sending requests_per_client."""
    max_tokens: int = 32
    requests_per_client: int = 2
    min_prompt: int = 20      # prompt tokens, chat template included
    max_prompt: int = 300
    seed: int = 1234
    format: dict | None = None   # structured output (Generate.format): every answer constrained

    def __post_init__(self):
        if self.max_tokens <= 0 or self.requests_per_client <= 0:
            raise ValueError("max_tokens and requests_per_client must be > 0")
        if not 0 < self.min_prompt <= self.max_prompt:
            raise ValueError("need 0 < min_prompt <= max_prompt")


@dataclass(frozen=True)
class Prompt:
    messages: list[dict]
    ids: list[int]     # the chat rendered and tokenized as the stack does it


def make_prompts(tokenizer, count: int, workload: Workload, salt: int) -> list[Prompt]:
    """`count` chats whose prompt lengths are uniform in [min_prompt, max_prompt] tokens.

    `salt` (e.g. the concurrency level) gives each level its own prompts, so that a level never
    reuses the KV prefix cache of the one before it.
    """
    rng = random.Random(workload.seed * 1_000_003 + salt)
    base = len(tokenizer.encode_chat([{"role": "user", "content": ""}]))
    out = []
    for _ in range(count):
        target = rng.randint(workload.min_prompt, workload.max_prompt)
        words = [rng.choice(_ASKS)]
        messages = [{"role": "user", "content": ""}]
        ids: list[int] = []
        # Grow by the estimated shortfall, then by single words, until the target is reached.
        while True:
            need = target - (len(ids) if ids else base)
            if need <= 0 and ids:
                break
            words.extend(rng.choice(_WORDS) for _ in range(max(1, need // 2)))
            messages = [{"role": "user", "content": " ".join(words)}]
            ids = tokenizer.encode_chat(messages)
        out.append(Prompt(messages, ids))
    return out


@dataclass
class RequestTiming:
    """One request as its client saw it, times in seconds on one monotonic clock."""
    sent: float
    prompt_tokens: int = 0
    token_times: list[float] = field(default_factory=list)   # one entry per generated token
    finish: str = ""
    error: str = ""

    def tokens(self, t: float, n: int) -> None:
        """`n` tokens arrived at `t` (a message may carry several)."""
        self.token_times.extend([t] * n)


@dataclass(frozen=True)
class Summary:
    concurrency: int
    requests: int
    errors: int
    tokens: int
    seconds: float
    tokens_per_s: float
    ttft_p50: float
    ttft_p99: float
    itl_p50: float
    itl_p99: float
    mean_prompt: float
    mean_completion: float
    finishes: dict


def summarize(concurrency: int, timings: list[RequestTiming]) -> Summary:
    """Aggregate generated tokens/s over the wall time of the level, latencies in seconds.

    Inter-token latency: the gaps between a request's consecutive tokens; tokens that came in
    one message share the gap before it equally (a message of k tokens after g seconds counts
    as k gaps of g/k), so that batching tokens into messages neither hides nor inflates it.
    """
    ok = [t for t in timings if not t.error and t.token_times]
    tokens = sum(len(t.token_times) for t in ok)
    start = min((t.sent for t in timings), default=0.0)
    end = max((t.token_times[-1] for t in ok), default=start)
    seconds = max(end - start, 1e-9)
    ttft = np.array([t.token_times[0] - t.sent for t in ok], dtype=np.float64)
    itl = np.array([g for t in ok for g in gaps(t.token_times)], dtype=np.float64)
    finishes: dict[str, int] = {}
    for t in timings:
        key = t.finish or ("error" if t.error else "?")
        finishes[key] = finishes.get(key, 0) + 1
    return Summary(
        concurrency=concurrency, requests=len(timings), errors=sum(1 for t in timings if t.error),
        tokens=tokens, seconds=seconds, tokens_per_s=tokens / seconds,
        ttft_p50=_pct(ttft, 50), ttft_p99=_pct(ttft, 99),
        itl_p50=_pct(itl, 50), itl_p99=_pct(itl, 99),
        mean_prompt=float(np.mean([t.prompt_tokens for t in ok])) if ok else 0.0,
        mean_completion=tokens / len(ok) if ok else 0.0, finishes=finishes)


def gaps(times: list[float]) -> list[float]:
    """A request's inter-token gaps, k tokens that arrived together sharing their gap."""
    gaps = []
    i = 1
    while i < len(times):
        j = i
        while j + 1 < len(times) and times[j + 1] == times[i]:
            j += 1
        k = j - i + 1   # tokens i..j arrived together
        gaps.extend([(times[i] - times[i - 1]) / k] * k)
        i = j + 1
    return gaps


def _pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if a.size else float("nan")
