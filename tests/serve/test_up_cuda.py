"""`llmbus up --device cuda` answering over HTTP (the OpenAI API), its shards on the GPU, as
llama.cpp does on the reference prompts: teacher-forced, each step's top token where llama.cpp is
sure of it, and the top 5's logit gaps within the GPU path's bound. Skipped without a CUDA device."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.engine.teacher import margins
from tests.engine.test_gpu import GPU_MAX_VS_LLAMA_CPP
from tests.gpu.conftest import cuda_reason

from .stack import Stack

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(cuda_reason() is not None, reason=f"no CUDA device: {cuda_reason()}")]

REF = json.loads((Path(__file__).parents[1] / "data" / "smollm2-135m-q4_1.llamacpp.json").read_text())


def completion(base: str, body: dict) -> dict:
    req = urllib.request.Request(f"{base}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def test_up_on_the_gpu_answers_as_llama_cpp_over_http(tmp_path, model_path):
    """Teacher-forced over HTTP: each reference prompt plus llama.cpp's greedy tokens so far goes in
    as token ids (the legacy completions API takes them), one token comes back with its top 5. Where
    llama.cpp's top two are 1.0 or more apart, ours is its top token; the gaps between the top token
    and the others (logit differences: a log-probability's normalization cancels) within twice the
    GPU path's bound on each logit."""
    from services.tokenizer.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(model_path)

    def text(token_id: int) -> str:
        return tok.token_bytes[token_id].decode("utf-8", errors="replace")
    stack = Stack(tmp_path, "--device", "cuda", "--shards", "2", "--model", str(model_path), ready_timeout=300)
    try:
        assert "on the GPU" in stack.drain_output()
        with urllib.request.urlopen(f"{stack.http}/v1/models", timeout=30) as r:
            model = json.load(r)["data"][0]["id"]
        gaps, sure_steps = [], 0
        for chat in REF["chats"]:
            sure = margins(chat) >= 1.0
            for i, step in enumerate(chat["greedy_steps_top5"]):
                out = completion(stack.http, {"model": model, "prompt": chat["prompt_ids"] + chat["greedy_ids"][:i],
                                              "max_tokens": 1, "temperature": 0, "logprobs": 5})
                choice = out["choices"][0]
                assert choice["finish_reason"] in ("length", "stop"), choice
                got = choice["logprobs"]["top_logprobs"][0]          # text -> log-probability
                if sure[i]:
                    assert choice["logprobs"]["tokens"][0] == text(step[0][0]), (chat["greedy_text"], i)
                    sure_steps += 1
                top = text(step[0][0])
                if top not in got:
                    continue
                for token_id, logit, _ in step[1:]:
                    if text(token_id) in got and text(token_id) and text(token_id) != top:
                        gaps.append(abs((got[text(token_id)] - got[top]) - (logit - step[0][1])))
        assert sure_steps >= 20 and len(gaps) >= 100, (sure_steps, len(gaps))
        print(f"\n--device cuda over HTTP vs llama.cpp: {sure_steps} sure steps agree; top-5 gap |diff| "
              f"mean {np.mean(gaps):.3f} max {np.max(gaps):.3f} over {len(gaps)}")
        assert np.max(gaps) <= 2 * GPU_MAX_VS_LLAMA_CPP
    finally:
        stack.close()
