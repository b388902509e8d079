"""A fuzzer against a running `llmbus up --shards 2`: bad `scheduler.generate` requests (every
field at and past its range, wrong types, huge and odd strings and lists, raw frames that are not
a Generate at all) sent beside good requests running at the same time.

Every bad request gets a typed refusal or completes as an odd-but-valid request; every good one
gets its greedy answer; no service crashes, restarts or counts an internal error; the scheduler
ends idle with every KV page free. CI runs a fixed, derandomized budget; run it longer with
LLMBUS_FUZZ_EXAMPLES=500.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st

from bus.errors import MessageTooLarge, RemoteError
from wire.limits import MAX_DEPTH
from wire.messages.bus import Error, Status
from wire.messages.scheduler import Generate, StatsRequest

from .fuzz_requests import (DENSE, BadUtf8, RawCaller, deep, generate_bodies, header, huge_text,
                            pack, raw_frames, short)
from .stack import Stack, call, generate, wait_for

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("LLMBUS_FUZZ_EXAMPLES", "30"))
# No shrinking: every step of it runs against the live stack, and a hang costs a minute each;
# the examples are small already (at most three requests and two raw messages).
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))

REFERENCE = json.loads((Path(__file__).parents[1] / "data" / "smollm2-135m-q4_1.llamacpp.json").read_text())
# "Name three primary colors." with llama.cpp's first two greedy tokens forced: its next three
# greedy tokens are ahead of the runner-up by 6.4, 1.6 and 1.3, more than our logits may move.
_COLORS = REFERENCE["chats"][2]
assert [round(s[0][1] - s[1][1], 1) for s in _COLORS["greedy_steps_top5"][2:5]] == [6.4, 1.6, 1.3]

# A refusal names what was wrong with the request; anything else (internal, timeout,
# upstream_failed...) is a bug the fuzzer found.
REFUSALS = {"bad_frame", "bad_messages", "unknown_template", "template_error", "text_too_long",
            "prompt_too_long", "empty_prompt", "bad_token_ids", "bad_max_tokens", "bad_sampling",
            "unknown_priority", "bad_stop_strings", "bad_request_id", "bad_seed",
            "duplicate_request_id", "queue_full"}
FINISHED = {"stop", "length", "repeated_line_loop", "repeated_phrase_loop"}
TOKENS_BEFORE_LEAVING = 3   # a valid fuzzed request is followed this far, then cancelled


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_path):
    s = Stack(tmp_path_factory.mktemp("runtime"), "--shards", "2", "--max-queue", "64",
              "--model", str(model_path))
    yield s
    s.close()


async def statuses(stack) -> dict[str, object]:
    """Status of every service of the stack, by name; each one must answer."""
    replies = await asyncio.gather(*(call(f"tcp://{p}", Status()) for p in stack.info["peers"]))
    return {r.name: r for r in replies}


async def idle(stack) -> dict | None:
    s = (await call(stack.endpoint, StatsRequest())).stats
    return s if s["running"] == 0 and s["waiting"] == 0 and s["pages_used"] == 0 else None


# ----------------------------------------------------------------------------------- good requests

async def good_japan(stack) -> None:
    res = await generate(stack.endpoint, Generate(
        messages=[{"role": "user", "content": "What is the capital of Japan?"}],
        temperature=0.0, max_tokens=10))
    assert res.text.startswith("The capital of Japan is Tokyo"), (res.text, res.done)


async def good_colors(stack) -> None:
    forced = _COLORS["greedy_ids"][:2]
    res = await generate(stack.endpoint, Generate(prompt_ids=_COLORS["prompt_ids"] + forced,
                                                  temperature=0.0, max_tokens=3))
    assert res.token_ids == _COLORS["greedy_ids"][2:5], (res.token_ids, res.done)


GOOD = {"japan": good_japan, "colors": good_colors}


# ----------------------------------------------------------------------------------- bad requests

async def fuzz_one(stack, body: dict) -> str:
    """Send one fuzzed Generate; return how it ended, or fail saying what went wrong."""
    try:
        res = await asyncio.wait_for(
            generate(stack.endpoint, Generate(**body), stop_after_tokens=TOKENS_BEFORE_LEAVING), 60)
    except RemoteError as e:
        assert e.code in REFUSALS, f"{short(body)} got {e}"
        return e.code
    except MessageTooLarge:   # refused by the client before sending (raw frames test the server)
        return "too_large"
    except (asyncio.TimeoutError, TimeoutError) as e:
        raise AssertionError(f"{short(body)} hung: {e!r}") from None
    if res.done is None:
        assert len(res.token_ids) >= TOKENS_BEFORE_LEAVING and res.started, short(body)
        return "left"
    assert res.done.finish_reason in FINISHED, f"{short(body)} ended {res.done}"
    return res.done.finish_reason


async def raw_one(stack, frames: list[bytes]) -> str:
    async with RawCaller(stack.endpoint, stack.key) as raw:
        reply = await raw.first_reply(frames)
    assert isinstance(reply.body, Error), f"{[f[:80] for f in frames]} answered {reply.body}"
    assert reply.body.code == "bad_frame", reply.body
    return reply.body.code


def epochs(statuses: dict) -> dict[str, int]:
    return {n: s.epoch for n, s in statuses.items()}


def internal_errors(statuses: dict) -> dict[str, int]:
    return {n: s.counters.get("errors.internal", 0) for n, s in statuses.items()}


async def after_each(stack, baseline: dict, before: dict) -> None:
    """No service restarted, none counted a new internal error, every page is free again."""
    now = await statuses(stack)
    assert epochs(now) == baseline, "a service restarted"
    assert internal_errors(now) == internal_errors(before), {n: s.counters for n, s in now.items()}
    await wait_for(lambda: idle(stack), timeout=30)


@pytest.fixture(scope="module")
def baseline(stack):
    return epochs(asyncio.run(statuses(stack)))


# The holes this fuzzer found, kept as cases that run every time (commits say what was fixed).
@FUZZ
@given(bodies=st.lists(generate_bodies(), min_size=1, max_size=3),
       raws=st.lists(raw_frames(), max_size=2), good=st.sampled_from(sorted(GOOD)))
# 10^6 ids stalled the scheduler's event loop ~2 s in decode: its peers took it for dead.
@example(bodies=[{"prompt_ids": [1] * 10**6}, {"prompt_ids": [49151] * 10**5}], raws=[],
         good="colors")
# A header over 1 MiB was refused under id 0: the caller never heard and hung.
@example(bodies=[{"prompt": huge_text((1 << 20) - 200)}, {"prompt": huge_text(4 * 10**5)}],
         raws=[], good="japan")
# Text under the tokenizer's limit whose ids overflow a reply: the scheduler waited 30 s.
@example(bodies=[{"prompt": DENSE[0]}, {"messages": [{"role": "user", "content": DENSE[1]}]}],
         raws=[], good="colors")
@example(bodies=[{"messages": [{"role": "user", "content": "hi"}] * 20000},
                 {"prompt": "hi", "stop": ["s"] * 5000}], raws=[], good="japan")
# A megabyte request_id went back on every event of the stream.
@example(bodies=[{"prompt": "hi", "request_id": huge_text(10**5)},
                 {"prompt": "hi", "request_id": "x" * 257}], raws=[], good="colors")
# Nesting past the depth limit was refused under id 0: the caller hung.
@example(bodies=[{"prompt": "x", "messages": [{"content": [{"k": deep(MAX_DEPTH + 2)}]}]}],
         raws=[], good="colors")
@example(bodies=[{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, 7]}]},
                 {"messages": [{"content": "no role"}]}, {"messages": [{"role": "user"}]}],
         raws=[[pack(header({"prompt": BadUtf8(b"\xed\xa0\x80")}))]], good="japan")
async def test_bad_requests_beside_good_ones_are_refused_typed_and_nothing_breaks(
        stack, baseline, bodies, raws, good):
    before = await statuses(stack)
    outcomes = await asyncio.gather(GOOD[good](stack), *(fuzz_one(stack, b) for b in bodies),
                                    *(raw_one(stack, r) for r in raws))
    for outcome in outcomes[1:]:   # what was reached: pytest --hypothesis-show-statistics
        event(outcome)
    await after_each(stack, baseline, before)


@pytest.mark.parametrize("fields", [
    {"top_k": 2**63}, {"top_k": 2**64 - 1}, {"seed": -1}, {"temperature": float("nan")},
    {"top_logprobs": 21}, {"repetition_penalty": 0.0}])
async def test_sampling_parameters_past_their_range_are_refused_not_failed_in_a_batch(
        stack, baseline, fields):
    # Beside a good request: a value the sampler cannot take must not reach a batch others share.
    bad, good = await asyncio.gather(generate(stack.endpoint, Generate(prompt="hi", **fields)),
                                     good_colors(stack), return_exceptions=True)
    assert isinstance(bad, RemoteError) and bad.code == "bad_sampling", bad
    if good is not None:
        raise good


async def test_the_stack_is_whole_and_idle_after_the_fuzzing(stack, baseline):
    now = await statuses(stack)
    assert epochs(now) == baseline and all(s.state == "ready" for s in now.values())
    assert not any(internal_errors(now).values()), {n: s.counters for n, s in now.items()}
    assert sum(s.counters.get("bad_frames", 0) for s in now.values()) > 0  # raw frames were sent
    s = await wait_for(lambda: idle(stack), timeout=30)
    assert s["pages_used"] == 0 and s["running"] == 0 and s["waiting"] == 0
