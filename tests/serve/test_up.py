"""`llmbus up` with 3 shard processes, used as a client would: concurrent requests, stop rules,
cancellation, a full queue, bad requests, and a shard killed mid-answer."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from bus.errors import RemoteError
from wire.messages.bus import Status
from wire.messages.scheduler import CancelRequest, Generate, StatsRequest, Tokens

from .stack import Stack, call, generate, wait_for

pytestmark = pytest.mark.slow

MAX_QUEUE = 20
TOPICS = ["the sea", "a red bicycle", "bread", "winter mornings", "the moon", "a small dog",
          "old libraries", "rain on a roof", "mountains", "a lighthouse", "coffee", "trains",
          "a garden", "snow", "clocks", "the desert"]


def request(i: int) -> Generate:
    """Request i of 16: prompts of 1 to 16 sentences, answers of 6 to 21 tokens."""
    topic = TOPICS[i]
    text = " ".join(f"Sentence {k} is about {topic}." for k in range(i + 1))
    return Generate(messages=[{"role": "user", "content": f"{text} Write one line about {topic}."}],
                    temperature=0.0, max_tokens=6 + i, request_id=f"req-{i}", top_logprobs=2)


def logprobs(res) -> list:
    """Every (token logprob, top ids, top logprobs) of a result, in order."""
    return [(lp, ids, tops) for ev in res.events if isinstance(ev, Tokens)
            for lp, ids, tops in zip(ev.logprobs, ev.top_ids or [None] * len(ev.logprobs),
                                     ev.top_logprobs or [None] * len(ev.logprobs))]


def assert_same_bits(a, b, what: str) -> None:
    """The README's promise with quantized weights: the same tokens, text and log-probabilities, bit
    for bit, whether a request ran alone, beside others, chunked otherwise or through a restart."""
    assert a.token_ids == b.token_ids, f"{what}: {a.text!r} != {b.text!r}"
    assert a.text == b.text, what
    assert logprobs(a) == logprobs(b), what


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_path):
    s = Stack(tmp_path_factory.mktemp("runtime"), "--shards", "3", "--max-queue", str(MAX_QUEUE),
              "--model", str(model_path))
    yield s
    s.close()
    assert not list(s.runtime.glob("*.json")), "the stack file outlived the stack"


async def stats(stack) -> dict:
    return (await call(stack.endpoint, StatsRequest())).stats


async def idle(stack) -> dict | None:
    s = await stats(stack)
    return s if s["running"] == 0 and s["waiting"] == 0 and s["pages_used"] == 0 else None


async def test_the_stack_answers_and_advertises_its_pipeline(stack):
    res = await generate(stack.endpoint, Generate(
        messages=[{"role": "user", "content": "What is the capital of Japan?"}],
        temperature=0.0, max_tokens=30))
    assert "Tokyo" in res.text
    assert res.done.finish_reason == "stop" and res.done.completion_tokens == len(res.token_ids)
    reply = await call(stack.endpoint, Status())
    # The last shard holds fewer layers: it also runs the output head (about 8 layers of work).
    assert reply.info["pipeline"] == ["shard-0", "shard-13", "shard-25"]
    assert {"page_use", "prefix_hit_rate", "pages_used"} <= set(reply.info)


async def test_sixteen_concurrent_requests_equal_each_run_alone(stack):
    alone = [await generate(stack.endpoint, request(i)) for i in range(16)]
    together = await asyncio.gather(*(generate(stack.endpoint, request(i)) for i in range(16)))
    for i, (a, t) in enumerate(zip(alone, together)):
        assert a.done.finish_reason in ("stop", "length"), a.done
        assert_same_bits(a, t, f"request {i}")
    # Every request ended, so every page is free again; the shared prompt pages were reused.
    s = await wait_for(lambda: idle(stack))
    assert s["prefix_hit_tokens"] > 0 and 0 < s["prefix_hit_rate"] <= 1


async def test_stop_strings_end_the_answer_and_are_never_emitted(stack):
    q = [{"role": "user", "content": "What is the capital of Japan?"}]
    full = await generate(stack.endpoint, Generate(messages=q, temperature=0.0, max_tokens=30))
    assert "capital of Japan is Tokyo" in full.text
    # " capital" and " of" are two tokens: the stop string spans a token boundary.
    res = await generate(stack.endpoint, Generate(messages=q, temperature=0.0, max_tokens=30,
                                                  stop=["capital of", "zzz"]))
    assert res.done.finish_reason == "stop" and res.done.stop_string == "capital of"
    assert res.text == full.text[:full.text.index("capital of")]
    assert "capital" not in res.text


async def test_max_tokens_ends_with_length(stack):
    res = await generate(stack.endpoint, Generate(
        messages=[{"role": "user", "content": "Write a long poem about the ocean."}],
        temperature=0.0, max_tokens=5))
    assert res.done.finish_reason == "length"
    assert len(res.token_ids) == res.done.completion_tokens == 5
    assert res.started.max_tokens == 5


async def test_a_caller_leaving_mid_stream_frees_its_pages_at_once(stack):
    long = Generate(messages=[{"role": "user", "content": "Tell me a very long story about a dragon."}],
                    temperature=0.0, max_tokens=400)
    before = (await stats(stack)).get("finished_cancelled", 0)     # counted from the first one
    res = await generate(stack.endpoint, long, stop_after_tokens=3)
    assert len(res.token_ids) >= 3 and res.done is None
    s = await wait_for(lambda: idle(stack), timeout=5)
    assert s["finished_cancelled"] == before + 1


async def test_cancel_by_id_ends_the_stream_with_cancelled(stack):
    long = Generate(messages=[{"role": "user", "content": "Write a long poem about the sea."}],
                    temperature=0.0, max_tokens=400, request_id="to-cancel")
    task = asyncio.create_task(generate(stack.endpoint, long))
    await wait_for(lambda: _running(stack, 1), timeout=20)
    reply = await call(stack.endpoint, CancelRequest(request_id="to-cancel"))
    assert reply.found
    res = await asyncio.wait_for(task, 10)
    assert res.done.finish_reason == "cancelled" and res.done.completion_tokens < 400
    await wait_for(lambda: idle(stack), timeout=5)
    assert not (await call(stack.endpoint, CancelRequest(request_id="to-cancel"))).found


async def _running(stack, n):
    return (await stats(stack))["running"] >= n


async def test_a_full_queue_refuses_at_once_with_retry_after(stack, model_path):
    from services.tokenizer import Tokenizer
    eos = Tokenizer.from_gguf(model_path).eot_ids
    # Long prompts: few fit into the micro-batches in flight, the rest wait and fill the queue.
    text = " ".join(f"Fact {k}: water is wet." for k in range(60))
    # One long prefix for all: the queue fills at submission, long before any prompt is prefilled,
    # and once the first prompts' pages are cached the rest prefill only their own last tokens.
    body = lambda i: Generate(messages=[{"role": "user", "content": f"{text} Request {i}."}],  # noqa: E731
                              temperature=0.0, max_tokens=1)
    tasks = [asyncio.create_task(generate(stack.endpoint, body(i), idle_timeout=600))
             for i in range(MAX_QUEUE + 20)]
    done, pending = await asyncio.wait(tasks, timeout=600)
    assert not pending, f"{len(pending)} requests never ended"
    refused = [t.exception() for t in tasks if t.exception() is not None]
    assert refused, "no request was refused"
    for e in refused:
        assert isinstance(e, RemoteError) and e.code == "queue_full", e
        assert e.retry_after is not None and e.retry_after > 0
    assert len(refused) <= 20 + 4 * 16  # only what the queue and the pipeline could not take
    # Every admitted request ran to its end: one greedy token, ended by max_tokens (or by EOS).
    admitted = {i: t.result() for i, t in enumerate(tasks) if t.exception() is None}
    for i, res in admitted.items():
        assert res.done is not None and len(res.token_ids) == res.done.completion_tokens == 1, (i, res.done)
        assert res.done.finish_reason == ("stop" if res.token_ids[0] in eos else "length"), (i, res.done)
    await wait_for(lambda: idle(stack), timeout=30)
    # Greedy: the same request alone, on an idle stack, gives the same token and text.
    for i in sorted(admitted)[::max(1, len(admitted) // 3)]:
        alone = await generate(stack.endpoint, body(i))
        assert (alone.token_ids, alone.text) == (admitted[i].token_ids, admitted[i].text), i


@pytest.mark.parametrize("body, code", [
    (Generate(messages=[]), "bad_messages"),
    (Generate(messages=[{"role": "wizard", "content": "hi"}]), "bad_messages"),
    (Generate(messages=[{"role": "user"}]), "bad_messages"),
    (Generate(prompt_ids=[]), "empty_prompt"),
    (Generate(prompt_ids=[1] * 9000), "prompt_too_long"),
    (Generate(prompt_ids=[10**6]), "bad_token_ids"),
    (Generate(prompt="hi", max_tokens=-1), "bad_max_tokens"),
    (Generate(prompt="hi", max_tokens=10**12), "bad_max_tokens"),
    (Generate(prompt="hi", temperature=-1.0), "bad_sampling"),
    (Generate(prompt="hi", top_p=0.0), "bad_sampling"),
    (Generate(prompt="hi", top_logprobs=1000), "bad_sampling"),
    (Generate(prompt="hi", top_k=2**63), "bad_sampling"),
    (Generate(prompt="hi", temperature=float("nan")), "bad_sampling"),
    (Generate(prompt="hi", min_p=float("inf")), "bad_sampling"),
    (Generate(prompt="hi", seed=-1), "bad_sampling"),
    (Generate(prompt="hi", priority="urgent"), "unknown_priority"),
    (Generate(prompt="hi", stop=[""]), "bad_stop_strings"),
], ids=["empty-messages", "unknown-role", "no-content", "empty-ids", "too-long", "bad-id",
        "negative-max-tokens", "absurd-max-tokens", "negative-temperature", "zero-top-p",
        "top-logprobs", "huge-top-k", "nan-temperature", "inf-min-p", "negative-seed", "priority",
        "empty-stop"])
async def test_bad_requests_get_typed_errors(stack, body, code):
    before = (await stats(stack)).get("batches", 0)
    with pytest.raises(RemoteError) as e:
        await generate(stack.endpoint, body)
    assert e.value.code == code, e.value
    assert await idle(stack)
    assert (await stats(stack)).get("batches", 0) == before   # refused before it was queued: no shard saw it


async def test_a_prompt_longer_than_one_batch_is_answered(stack):
    # Its first chunks sample nothing: the last shard must answer those batches with no rows.
    text = " ".join(f"Line {k} of the log says the pump is fine." for k in range(50))
    res = await asyncio.wait_for(generate(stack.endpoint, Generate(
        messages=[{"role": "user", "content": f"{text} Is the pump fine?"}],
        temperature=0.0, max_tokens=4)), 180)
    assert res.started.prompt_tokens > 512, res.started     # the default batch budget
    assert res.done.finish_reason in ("length", "stop"), res.done
    assert 1 <= len(res.token_ids) <= 4
    assert await wait_for(lambda: idle(stack), timeout=30)


async def test_two_prompts_at_once_are_refused_by_the_schema(stack):
    with pytest.raises(RemoteError) as e:
        await generate(stack.endpoint, Generate(prompt="a", prompt_ids=[1]))
    assert e.value.code == "bad_frame" and "exactly one of" in e.value.message


async def test_a_shard_killed_mid_answer_is_carried_through(stack):
    body = Generate(messages=[{"role": "user", "content": "Describe a forest in spring."}],
                    temperature=0.0, max_tokens=40, top_logprobs=2)
    alone = await generate(stack.endpoint, body)
    before = await call(stack.endpoint, Status())
    victim = await _pid_of(stack, "shard-13")
    killed = []

    def kill_mid_answer(n_tokens: int) -> None:      # 3 of 40 tokens in: certainly mid-answer
        if n_tokens >= 3 and not killed:
            os.kill(victim, signal.SIGKILL)
            killed.append(n_tokens)

    res = await asyncio.wait_for(generate(stack.endpoint, body, on_tokens=kill_mid_answer), 120)
    assert killed
    assert_same_bits(res, alone, "carried through a shard's restart")
    assert res.done.finish_reason == alone.done.finish_reason
    after = await stats(stack)
    assert after["recoveries"] >= 1
    assert "exited" in stack.drain_output()  # `up` noticed and started it again
    assert before.info["pipeline"] == (await call(stack.endpoint, Status())).info["pipeline"]


async def _pid_of(stack, name: str) -> int:
    for peer in stack.info["peers"]:
        reply = await call(f"tcp://{peer}", Status())
        if reply.name == name:
            return reply.info["pid"]
    raise AssertionError(f"no {name} among {stack.info['peers']}")
