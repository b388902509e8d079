"""Gemma 3 270M Q4_K_M (a gemma3 GGUF with a SentencePiece vocabulary and no chat template) served by
`llmbus up --model`, against llama.cpp's references (tests/data/make_gemma_refs.py), and our float32
forward against llama.cpp's run of the same weights dequantized to F32 (tests/data/make_gemma_f32_refs.py).

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

DATA = Path(__file__).parent.parent / "data"
REF = json.loads((DATA / "gemma3-270m-q4_k_m.llamacpp.json").read_text())
REF_F32 = json.loads((DATA / "gemma3-270m-f32.llamacpp.json").read_text())
# Issue 14 asks 1.0 (what the default model meets); our max is 1.443 (1.13 with a float32 KV cache and
# float32 q; 1.364 before other changes), on every kernel path, and it is not an error of ours
# that can be fixed: llama.cpp itself lands as far from this reference on the same file when it changes
# only how it batches, its attention path or its KV precision (python3 -m bench.llamacpp_spread; these
# 5 items x 24 steps, top-5 ids):
#   the teacher-forced tokens prefilled in one batch instead of one decode each   max 1.05, mean 0.16
#   flash attention off (its default here is on, with F16 K/V)                    max 1.27, mean 0.24
#   flash attention off and an F32 KV cache                                       max 1.61, mean 0.25
# The 8-bit activation rounding (Q8_0 / Q8_K before every quantized product) turns such small
# differences into whole quantization steps, layer after layer; our float16 rounding of keys that are
# not llama.cpp's to the bit is one of them (the mean went 0.231 -> 0.226, the max 1.13 -> 1.44). Our
# architecture's arithmetic is pinned separately, in float32, to 0.05 (test_float32_forward_follows...).
TOP5_MAX = 1.5
# Our float32 forward lands 0.033 from llama.cpp's F32 run (flash attention off, F32 KV; 0.014 with our
# cache in float32 too, the rest is our float16 KV cache); llama.cpp's
# own two attention paths on the F32 file differ by 0.028. Errors in the architecture's arithmetic land
# far past it: the global RoPE base (1e6) on the local layers 10.4, a norm epsilon of 1e-5 for 1e-6
# 1.19. (These prompts are under the 512-key window: the window's masking is not exercised here.)
F32_TOP5_MAX = 0.05


@pytest.fixture(scope="module")
def gemma() -> Path:
    if not is_pulled(GEMMA3_270M) and not in_ci():
        pytest.skip("Gemma 3 270M is not pulled (llmbus pull gemma3-270m-q4_k_m)")
    return pull(GEMMA3_270M) if in_ci() else model_path(GEMMA3_270M)


def test_prompts_tokenize_as_llama_cpp_with_the_builtin_gemma_template(gemma):
    tok = Tokenizer.from_gguf(gemma)
    # The GGUF has none (a base model): no default, its family's suggested, chosen here.
    assert tok.templates.default_name is None and tok.templates.suggested == "gemma"
    tok.templates.use("gemma")
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


def test_float32_forward_follows_llama_cpp_on_the_same_weights_in_float32(gemma):
    """Every weight dequantized, no 8-bit activations on either side: only the architecture's float32
    arithmetic is compared (tests/data/make_gemma_f32_refs.py), and there the two agree closely."""
    shard = make_shard(load_weights(gemma, 0, 18, "float32"), num_pages=64, page_size=16)
    diffs = []
    for item in REF_F32["items"]:
        steps = item["steps_top5"]
        logits = teacher_forced(shard.forward, {**item, "greedy_steps_top5": steps})
        ids = np.array([[t[0] for t in s] for s in steps])
        want = np.array([[t[1] for t in s] for s in steps])
        diffs.append(np.abs(np.take_along_axis(logits, ids, 1) - want).ravel())
    d = np.concatenate(diffs)
    print(f"\ngemma3 270M float32 vs llama.cpp F32: top-5 |logit diff| max {d.max():.4f}, mean {d.mean():.4f}")
    assert d.max() <= F32_TOP5_MAX, d.max()


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
    stack = Stack(tmp_path, "--model", str(gemma), "--chat-template", "gemma", "--shards", "2",
                  ready_timeout=600)
    try:
        for body, item in asks:
            res = await generate(stack.endpoint, body, idle_timeout=300)
            assert res.token_ids == _agreed(item), (res.text, item["greedy_text"])
    finally:
        stack.stop()
