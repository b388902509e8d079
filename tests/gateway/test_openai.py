"""The official `openai` client, strict, against a real stack through the gateway."""

from __future__ import annotations

import json
import urllib.request

import aiohttp
import openai
import pytest

pytestmark = pytest.mark.slow

JAPAN = [{"role": "user", "content": "What is the capital of Japan?"}]
ANSWER = "The capital of Japan is Tokyo."


def test_models_list_the_served_model_and_refuse_others(oai, model):
    assert oai.models.retrieve(model).id == model
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("gpt-unknown")
    with pytest.raises(openai.NotFoundError) as e:
        oai.chat.completions.create(model="gpt-unknown", messages=JAPAN, max_tokens=2)
    assert e.value.body["param"] == "model"


def test_every_name_of_the_model_is_accepted_and_listed(oai, model, model_path, stack):
    from services.modelstore.gguf_meta import read_metadata
    general = read_metadata(model_path)["general.name"]
    # The names a user meets: the pull name (the stack was started with it: --model NAME), the
    # file's name and stem, and general.name, which is the listed id.
    names = ["smollm2-135m-instruct-q4_1", model_path.name, model_path.stem]
    (listed,) = oai.models.list().data
    assert listed.id == general == model and listed.aliases == names
    assert stack.info["model"] == str(model_path)
    # Case and spaces aside.
    for name in [general, *names, general.upper().replace(" ", ""), model_path.stem.lower(),
                 " SmolLM2-135M-Instruct.Q4_1 "]:
        r = oai.chat.completions.create(model=name, messages=JAPAN, max_tokens=1, temperature=0)
        assert r.model == model, name
        assert oai.models.retrieve(name.strip()).id == model
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="smollm2-135m", messages=JAPAN, max_tokens=1)


def test_a_greedy_answer_with_logprobs_and_usage(oai, model):
    r = oai.chat.completions.create(model=model, messages=JAPAN, temperature=0, logprobs=True,
                                       top_logprobs=3)
    choice = r.choices[0]
    assert choice.message.content == ANSWER and choice.finish_reason == "stop"
    content = choice.logprobs.content
    # Greedy: every sampled token is the best of its top list, and the tokens spell the answer
    # (the end-of-turn token has no text).
    assert "".join(t.token for t in content) == ANSWER
    for t in content:
        assert len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob)
        assert t.logprob <= 0 and bytes(t.bytes).decode() == t.token
    assert r.usage.completion_tokens == len(content)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_the_developer_role_is_a_system_prompt(oai, model):
    r = oai.chat.completions.create(model=model, temperature=0, max_tokens=12, messages=[
        {"role": "developer", "content": "You are a helpful assistant."}, *JAPAN])
    s = oai.chat.completions.create(model=model, temperature=0, max_tokens=12, messages=[
        {"role": "system", "content": "You are a helpful assistant."}, *JAPAN])
    assert r.choices[0].message.content == s.choices[0].message.content
    assert r.usage.prompt_tokens == s.usage.prompt_tokens


def test_streaming_gives_the_same_answer_and_usage(oai, model):
    chunks = list(oai.chat.completions.create(model=model, messages=JAPAN, temperature=0,
                                                 stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


async def test_the_exact_chunk_sequence(stack, model):
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.http + "/v1/chat/completions", json={
                "model": model, "messages": JAPAN, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
            raw = (await r.read()).decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and all(e.startswith("data: ") for e in events[:-1])
    datas = [e[len("data: "):] for e in events[:-1]]
    assert datas[-1] == "[DONE]"
    chunks = [json.loads(d) for d in datas[:-1]]
    first, *middle, finish, usage = chunks
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(set(c["choices"][0]["delta"]) == {"content"} and c["choices"][0]["finish_reason"]
               is None for c in middle)
    assert finish["choices"][0]["delta"] == {} and finish["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == first["id"]
               and c["created"] == first["created"] and c["model"] == model for c in chunks)


def test_stop_strings_are_not_emitted(oai, model):
    r = oai.chat.completions.create(model=model, messages=JAPAN, temperature=0,
                                       stop=["Tokyo", "Kyoto"])
    assert r.choices[0].message.content == "The capital of Japan is "
    assert r.choices[0].finish_reason == "stop"


def test_max_completion_tokens_wins_over_max_tokens(oai, model):
    r = oai.chat.completions.create(model=model, messages=JAPAN, temperature=0, max_tokens=20,
                                       max_completion_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    assert ANSWER.startswith(r.choices[0].message.content)


def test_a_seed_repeats_an_answer_and_n_gives_one_choice_per_seed(oai, model):
    ask = dict(model=model, messages=[{"role": "user", "content": "Name a color."}],
               temperature=1.0, max_tokens=12, presence_penalty=0.5, frequency_penalty=0.5)
    one = oai.chat.completions.create(**ask, seed=1234)
    again = oai.chat.completions.create(**ask, seed=1234)
    assert one.choices[0].message.content == again.choices[0].message.content
    both = oai.chat.completions.create(**ask, seed=1234, n=2)
    assert [c.index for c in both.choices] == [0, 1]
    # Choice i uses seed + i: the first is the single answer of the same seed.
    assert both.choices[0].message.content == one.choices[0].message.content
    second = oai.chat.completions.create(**ask, seed=1235)
    assert both.choices[1].message.content == second.choices[0].message.content
    assert both.usage.prompt_tokens == one.usage.prompt_tokens    # one prompt, counted once


def test_legacy_completions(oai, model, stack):
    r = oai.completions.create(model=model, prompt="The capital of France is", max_tokens=3,
                                  temperature=0, logprobs=2)
    choice = r.choices[0]
    assert choice.text.startswith(" Paris") and choice.finish_reason == "length"
    assert "".join(choice.logprobs.tokens) == choice.text
    assert all(len(t) == 2 for t in choice.logprobs.top_logprobs)
    # The SDK's Completion type demands a finish_reason that OpenAI itself sends as null on
    # every chunk but the last, so legacy streams can only be read without strict validation.
    lax = openai.OpenAI(base_url=stack.http + "/v1", api_key="unused", max_retries=0)
    chunks = list(lax.completions.create(model=model, prompt="The capital of France is",
                                         max_tokens=3, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert [c.choices[0].finish_reason for c in chunks][-1] == "length"


def test_legacy_echo_returns_the_prompt_before_the_completion(oai, model, stack):
    prompt = "The capital of France is"
    plain = oai.completions.create(model=model, prompt=prompt, max_tokens=3, temperature=0)
    r = oai.completions.create(model=model, prompt=prompt, max_tokens=3, temperature=0, echo=True)
    assert r.choices[0].text == prompt + plain.choices[0].text
    assert r.usage == plain.usage
    # Token ids are echoed as their text; each prompt of a list gets its own.
    ids = [504, 3575, 282]
    by_ids = oai.completions.create(model=model, prompt=ids, max_tokens=1, temperature=0,
                                    echo=True).choices[0].text
    with urllib.request.urlopen(urllib.request.Request(
            stack.http + "/detokenize", data=json.dumps({"tokens": ids}).encode(),
            headers={"Content-Type": "application/json"})) as resp:
        assert by_ids.startswith(json.loads(resp.read())["content"])
    r = oai.completions.create(model=model, prompt=[prompt, "Paris is"], max_tokens=1,
                               temperature=0, echo=True)
    assert r.choices[0].text.startswith(prompt) and r.choices[1].text.startswith("Paris is")
    lax = openai.OpenAI(base_url=stack.http + "/v1", api_key="unused", max_retries=0)
    chunks = list(lax.completions.create(model=model, prompt=prompt, max_tokens=3,
                                         temperature=0, echo=True, stream=True))
    assert chunks[0].choices[0].text == prompt
    assert "".join(c.choices[0].text for c in chunks) == prompt + plain.choices[0].text
    # The prompt tokens' logprobs are not computed: echo with logprobs is refused, by name.
    with pytest.raises(openai.BadRequestError) as e:
        oai.completions.create(model=model, prompt=prompt, max_tokens=1, echo=True, logprobs=1)
    assert e.value.body["param"] == "echo"


@pytest.mark.parametrize("field, value", [("temperature", "hot"), ("n", 0), ("top_logprobs", 40),
                                          ("max_tokens", -1), ("stop", [1, 2])])
def test_bad_fields_are_400s_naming_the_field(oai, model, field, value):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model, messages=JAPAN, logprobs=True,
                                       extra_body={field: value})
    assert e.value.body["param"] == field


def test_n_choices_stream_side_by_side(oai, model):
    ask = dict(model=model, messages=[{"role": "user", "content": "Name a color."}],
               temperature=1.0, max_tokens=10, seed=99, n=2)
    whole = oai.chat.completions.create(**ask)
    texts, finishes = {0: "", 1: ""}, {}
    for c in oai.chat.completions.create(**ask, stream=True):
        for choice in c.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert texts == {c.index: c.message.content for c in whole.choices}
    assert finishes == {c.index: c.finish_reason for c in whole.choices}


def test_penalties_move_greedy_off_a_repeated_token(oai, model):
    # The expected token is derived from the unpenalized greedy answer's own top-5 logprobs:
    # OpenAI's penalties lower each generated token's logit by presence + frequency * count,
    # so greedy picks the best of the five after those deductions.
    PRESENCE, FREQUENCY = 2.0, 2.0
    ask = dict(model=model, messages=[{"role": "user", "content": "Count from 1 to 20."}],
               temperature=0, logprobs=True, top_logprobs=5)
    plain = oai.chat.completions.create(**ask, max_tokens=60).choices[0].logprobs.content
    counts: dict[bytes, int] = {}
    for k, step in enumerate(plain):
        scores = {}
        for t in step.top_logprobs:
            n = counts.get(bytes(t.bytes), 0)
            scores[bytes(t.bytes)] = t.logprob - (PRESENCE * (n > 0) + FREQUENCY * n)
        best = max(scores, key=scores.get)
        # A token outside the five could only win if every one of them fell below the fifth.
        assert scores[best] > min(t.logprob for t in step.top_logprobs), "undecidable step"
        if best != bytes(step.bytes):
            margin = scores[best] - sorted(scores.values())[-2]
            break
        counts[bytes(step.bytes)] = counts.get(bytes(step.bytes), 0) + 1
    else:
        pytest.fail("the plain greedy answer never repeats a token the penalties would displace")
    assert margin > 1e-3, "too close to call in float32"
    moved = oai.chat.completions.create(**ask, max_tokens=k + 1, presence_penalty=PRESENCE,
                                           frequency_penalty=FREQUENCY)
    got = [bytes(t.bytes) for t in moved.choices[0].logprobs.content]
    assert got[:k] == [bytes(t.bytes) for t in plain[:k]]     # the same until the first repeat
    assert got[k] == best
