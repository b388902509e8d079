"""`llmbus up --device cuda` answering over HTTP (the OpenAI API), its shards on the GPU: the
reference chats' greedy answers as llama.cpp gives them, and each answer token's log-probability
within the GPU path's bound of llama.cpp's. Skipped without a CUDA device."""

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


def agreed(chat) -> list[int]:
    """llama.cpp's greedy tokens up to its first step whose top-2 margin is under 1.0."""
    m = margins(chat)
    return chat["greedy_ids"][:int(np.argmax(m < 1.0)) if (m < 1.0).any() else len(m)]


def chat_completion(base: str, body: dict) -> dict:
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def test_up_on_the_gpu_answers_as_llama_cpp_over_http(tmp_path, model_path):
    from services.tokenizer.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(model_path)
    stack = Stack(tmp_path, "--device", "cuda", "--shards", "2", "--model", str(model_path), ready_timeout=300)
    try:
        assert "on the GPU" in stack.drain_output()
        checked = 0
        for chat in REF["chats"]:
            ids = agreed(chat)
            if not ids:
                continue
            out = chat_completion(stack.http, {"model": "m", "messages": chat["messages"], "temperature": 0,
                                               "max_tokens": len(ids), "logprobs": True})
            choice = out["choices"][0]
            assert choice["message"]["content"] == tok.decode(ids, skip_special=True), chat["greedy_text"]
            got = [t["logprob"] for t in choice["logprobs"]["content"]]
            assert len(ids) - 1 <= len(got) <= len(ids)        # an end-of-turn token may close it unreported
            want = [step[0][2] for step in chat["greedy_steps_top5"][:len(got)]]
            assert np.abs(np.array(got) - np.array(want)).max() <= GPU_MAX_VS_LLAMA_CPP
            checked += 1
        assert checked >= 2
    finally:
        stack.close()
