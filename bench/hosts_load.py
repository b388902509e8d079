"""What the multi-host benches ask and how their timings are summed. Pure: no sockets.

Every engine gets the same prompts (one per concurrent client, each its own opening so that no
prefix cache joins them) and is summed by the same arithmetic. The decode rate is taken where
every request of a level is decoding at once: from the last first token to the first last token,
the tokens that arrived then over its length. Prefill and the ragged start and end stay out.
"""

from __future__ import annotations

from bench.serve_workload import Prompt, RequestTiming, gaps

_TOPICS = ("lighthouse keeper", "train across a continent", "dragon and a baker", "winter letter",
           "bicycle repair shop", "morning market", "sea captain's diary", "history of bread",
           "mountain village", "city library at night", "river festival", "old clockmaker")


def prompts(n: int) -> list[Prompt]:
    """n chats of about 30 prompt tokens, each opening with words of its own."""
    out = []
    for i in range(n):
        topic = _TOPICS[i % len(_TOPICS)]
        text = (f"Request {i}: write a long, detailed story about a {topic}, with many characters, "
                f"places and events, told slowly from the beginning to the end.")
        out.append(Prompt([{"role": "user", "content": text}], []))
    return out


def decode_rates(timings: list[RequestTiming]) -> dict:
    """Tokens, failures, finish reasons and rates of one level (see the module's docstring)."""
    ok = [t for t in timings if not t.error and len(t.token_times) >= 2]
    out = {"requests": len(timings), "errors": [t.error for t in timings if t.error],
           "tokens": [len(t.token_times) for t in timings],
           "finishes": sorted(t.finish for t in timings),
           "ttft_s": [round(t.token_times[0] - t.sent, 3) for t in timings if t.token_times],
           "prompt_tokens": [t.prompt_tokens for t in timings]}
    if not ok:
        return {**out, "decode_tok_s": 0.0, "wall_tok_s": 0.0, "itl_ms": None, "window_s": 0.0}
    start = max(t.token_times[0] for t in ok)
    end = min(t.token_times[-1] for t in ok)
    if end > start:
        n = sum(sum(1 for x in t.token_times if start < x <= end) for t in ok)
        rate, window = n / (end - start), end - start
    else:   # the requests never all decoded at once: add up their own rates
        rate = sum((len(t.token_times) - 1) / (t.token_times[-1] - t.token_times[0]) for t in ok)
        window = 0.0
    itl = [g for t in ok for g in gaps(t.token_times)]
    wall = max(t.token_times[-1] for t in ok) - min(t.sent for t in timings)
    return {**out, "decode_tok_s": rate, "window_s": window,
            "wall_tok_s": sum(len(t.token_times) for t in ok) / wall,
            "itl_ms": 1000 * sum(itl) / len(itl)}
