"""Gemma 3 270M Q4_K_M (a gemma3 GGUF with a SentencePiece vocabulary and no chat template) served by
`llmbus up --model`, against llama.cpp's references (tests/data/make_gemma_refs.py).

Skipped where the model is not pulled (`llmbus pull gemma3-270m-q4_k_m`), except under CI.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from services.modelstore.pull import GEMMA3_270M, is_pulled, model_path, pull
from services.modelstore.weight_cache import load_weights
from services.tokenizer.tokenizer import Tokenizer
from tests.conftest import in_ci
from tests.engine.conftest import make_shard
from tests.engine.teacher import margins, teacher_forced
from wire.messages.scheduler import Generate

from .stack import Stack, generate

pytestmark = pytest.mark.slow

REF = json.loads((Path(__file__).parent.parent / "data" / "gemma3-270m-q4_k_m.llamacpp.json").read_text())
# Until the native kernel multiplies K-quant and Q5_0 blocks (branch kquants), those layers run in
# float32 without llama.cpp's 8-bit activations: top-5 logits land up to 1.4 from llama.cpp's
# (1.0 is the bound the default model meets through its own blocks).
TOP5_MAX = 1.5


@pytest.fixture(scope="module")
def gemma() -> Path:
    if not is_pulled(GEMMA3_270M) and not in_ci():
        pytest.skip("Gemma 3 270M is not pulled (llmbus pull gemma3-270m-q4_k_m)")
    return pull(GEMMA3_270M) if in_ci() else model_path(GEMMA3_270M)


def test_prompts_tokenize_as_llama_cpp_with_the_builtin_gemma_template(gemma):
    tok = Tokenizer.from_gguf(gemma)
    assert tok.templates.default_name == "gemma"          # the GGUF has none: its family's
    for chat in REF["chats"]:
        # Our template writes BOS itself; llama.cpp's tokenizer adds it to the text it formatted.
        assert tok.render_chat(chat["messages"]) == tok.vocab.tokens[tok.bos_id] + chat["prompt"]
        assert tok.encode_chat(chat["messages"]) == chat["prompt_ids"]
    for item in REF["completions"]:
        assert tok.encode(item["prompt"], add_special=True) == item["prompt_ids"]
    assert {tok.vocab.tokens[i] for i in tok.eot_ids} >= {"<end_of_turn>", "<eos>"}


def test_teacher_forced_against_llama_cpp(gemma):
    shard = make_shard(load_weights(gemma, 0, 18, "quantized"), num_pages=64, page_size=16)
    diffs = []
    for item in REF["chats"] + REF["completions"]:
        logits = teacher_forced(shard.forward, item)
        ids = np.array([[t[0] for t in s] for s in item["greedy_steps_top5"]])
        want = np.array([[t[1] for t in s] for s in item["greedy_steps_top5"]])
        sure = margins(item) >= 1.0
        np.testing.assert_array_equal(logits.argmax(1)[sure], ids[sure, 0])
        d = np.abs(np.take_along_axis(logits, ids, 1) - want)
        assert d.mean() <= 0.35, d.mean()
        diffs.append(d.ravel())
    d = np.concatenate(diffs)
    print(f"\ngemma3 270M vs llama.cpp: top-5 |logit diff| max {d.max():.3f}, mean {d.mean():.3f}")
    assert d.max() <= TOP5_MAX


def _agreed(item) -> list[int]:
    """llama.cpp's greedy tokens up to its first step whose top-2 margin is under 1.0: past one,
    another forward may rightly take the other token (tests/data's reference README)."""
    m = margins(item)
    n = int(np.argmax(m < 1.0)) if (m < 1.0).any() else len(m)
    return item["greedy_ids"][:n]


async def test_up_serves_llama_cpp_greedy_answers(gemma, tmp_path):
    asks = [(Generate(messages=c["messages"], temperature=0.0, max_tokens=len(_agreed(c))), c) for c in REF["chats"]]
    asks += [(Generate(prompt=c["prompt"], temperature=0.0, max_tokens=len(_agreed(c))), c)
             for c in REF["completions"] if _agreed(c)]     # one opens on a close call: nothing to hold it to
    assert len(asks) >= 4
    stack = Stack(tmp_path, "--model", str(gemma), "--shards", "2", ready_timeout=600)
    try:
        for body, item in asks:
            res = await generate(stack.endpoint, body, idle_timeout=300)
            assert res.token_ids == _agreed(item), (res.text, item["greedy_text"])
    finally:
        stack.stop()
