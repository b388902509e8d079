"""How far llama.cpp lands from its own Gemma 3 270M reference when it changes only how it computes.

    python3 -m bench.llamacpp_spread        # needs llama-cpp-python and `llmbus pull gemma3-270m-q4_k_m`

Teacher-forced along tests/data/gemma3-270m-q4_k_m.llamacpp.json's items, llama.cpp runs the same
Q4_K_M file again under context settings that leave the model alone: as the reference
was made (a check: 0 apart), the greedy tokens prefilled in one batch with the prompt, flash attention
off (F16 KV), flash attention off with an F32 KV cache. It prints max / mean |logit - reference| over
the reference's top-5 ids: the spread any engine that does not reproduce ggml's arithmetic bit for
bit must expect (tests/serve/test_gemma3_270m.py's TOP5_MAX).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.llamacpp_figures import Context, LlamaCpp
from services.modelstore.pull import GEMMA3_270M, model_path

REF = Path(__file__).parent.parent / "tests" / "data" / "gemma3-270m-q4_k_m.llamacpp.json"
SETTINGS = {"as the reference": ({}, False), "one batch": ({}, True),
            "flash attention off": ({"flash_attn_type": 0}, False),
            "flash attention off, F32 KV": ({"flash_attn_type": 0, "type_k": 0, "type_v": 0}, False)}


def run(lc, llm: LlamaCpp, item: dict, params: dict, one_batch: bool) -> np.ndarray:
    """Logits (steps, vocab) at each teacher-forced step of `item`."""
    cp = lc.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 512, 256, 256, 1
    cp.n_threads = cp.n_threads_batch = llm.threads
    for k, v in params.items():
        setattr(cp, k, v)
    ctx = lc.llama_init_from_model(llm.model, cp)
    c = Context(lc, ctx, 256, 1)
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(llm.model))
    row = lambda i: np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()  # noqa: E731
    prompt, greedy, n = item["prompt_ids"], item["greedy_ids"], len(item["greedy_steps_top5"])
    try:
        if one_batch:
            c.decode([(0, t, p, p >= len(prompt) - 1) for p, t in enumerate(prompt + greedy[:n - 1])])
            return np.array([row(len(prompt) - 1 + s) for s in range(n)])
        c.decode([(0, t, p, p == len(prompt) - 1) for p, t in enumerate(prompt)])
        rows = [row(-1)]
        for s in range(1, n):
            c.decode([(0, greedy[s - 1], len(prompt) + s - 1, True)])
            rows.append(row(-1))
        return np.array(rows)
    finally:
        lc.llama_batch_free(c.batch)
        lc.llama_free(ctx)


def main() -> None:
    import llama_cpp as lc  # noqa: PLC0415 - optional: the `bench` extra

    ref = json.loads(REF.read_text())
    items = ref["chats"] + ref["completions"]
    llm = LlamaCpp(lc, model_path(GEMMA3_270M), threads=2)
    for name, (params, one_batch) in SETTINGS.items():
        d = []
        for item in items:
            steps = item["greedy_steps_top5"]
            ids = np.array([[t[0] for t in s] for s in steps])
            want = np.array([[t[1] for t in s] for s in steps])
            d.append(np.abs(np.take_along_axis(run(lc, llm, item, params, one_batch), ids, 1) - want).ravel())
        d = np.concatenate(d)
        print(f"llama.cpp {name:30s} vs its reference: top-5 max {d.max():.3f}, mean {d.mean():.3f}", flush=True)
    llm.close()


if __name__ == "__main__":
    main()
