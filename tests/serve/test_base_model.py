"""A base model (Gemma 3 270M: no chat template in its GGUF) served by `llmbus up`: listings
say it cannot chat, every chat endpoint answers a 400 that says so and points to
/v1/completions or --chat-template, and completions (OpenAI's, and Ollama's /api/generate,
which sends a base model's prompt as it is) answer. `--chat-template NAME` itself is what
test_gemma3_270m.py serves the same model with, against llama.cpp.

Skipped where the model is not pulled (`llmbus pull gemma3-270m-q4_k_m`), except under CI.
"""

from __future__ import annotations

import subprocess

import anthropic
import ollama
import openai
import pytest

from services.modelstore.pull import GEMMA3_270M, is_pulled, model_path, pull
from tests.bus.procs import ROOT, cli, env
from tests.conftest import in_ci

from .stack import Stack

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "What is the capital of Japan?"}]
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if not is_pulled(GEMMA3_270M) and not in_ci():
        pytest.skip("Gemma 3 270M is not pulled (llmbus pull gemma3-270m-q4_k_m)")
    gemma = pull(GEMMA3_270M) if in_ci() else model_path(GEMMA3_270M)
    s = Stack(tmp_path_factory.mktemp("base-model"), "--model", str(gemma), "--shards", "1",
              ready_timeout=600)
    yield s
    s.close()


@pytest.fixture(scope="module")
def oai(stack):
    c = openai.OpenAI(base_url=stack.http + "/v1", api_key="unused", max_retries=0, timeout=120,
                      _strict_response_validation=True)
    yield c
    c.close()


def _says_why(message: str) -> None:
    assert "no chat template" in message and "/v1/completions" in message
    assert "--chat-template gemma" in message       # its vocabulary's family, suggested


def test_listings_say_the_model_cannot_chat(oai, stack):
    (m,) = oai.models.list().data
    assert m.model_dump()["capabilities"] == ["completion"]
    show = ollama.Client(host=stack.http).show(m.id)
    assert show.capabilities == ["completion"]


def test_every_chat_endpoint_refuses_with_a_400_that_says_why(oai, stack):
    model = oai.models.list().data[0].id
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model, messages=ASK, max_tokens=4)
    _says_why(e.value.message)
    assert e.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model=model, input=ASK, max_output_tokens=4)
    _says_why(e.value.message)
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model, messages=ASK, max_tokens=4, stream=True)
    _says_why(e.value.message)
    claude = anthropic.Anthropic(base_url=stack.http, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=model, messages=ASK, max_tokens=4)
    _says_why(e.value.message)
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=stack.http).chat(model=model, messages=ASK)
    assert e.value.status_code == 400
    _says_why(e.value.error)


def test_completions_answer_and_ollama_generate_sends_the_prompt_as_it_is(oai, stack):
    model = oai.models.list().data[0].id
    r = oai.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0)
    assert r.choices[0].text.strip()
    g = ollama.Client(host=stack.http).generate(model=model, prompt=PROMPT,
                                                options={"num_predict": 4, "temperature": 0})
    assert g.response == r.choices[0].text
    assert g.prompt_eval_count == r.usage.prompt_tokens


def test_a_chat_template_that_is_neither_a_name_nor_a_file_stops_up_before_it_starts(model_path):
    p = subprocess.run(cli("up", "--model", str(model_path), "--chat-template", "nope",
                           "--http", "127.0.0.1:0"),
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--chat-template nope: neither a template name" in p.stderr + p.stdout
