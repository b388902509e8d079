"""Make tests/data/gemma3-270m-q4_k_m.llamacpp.json: llama.cpp's greedy answers on Gemma 3 270M.

    llmbus pull gemma3-270m-q4_k_m && python3 -m tests.data.make_gemma_refs    # needs llama-cpp-python

The GGUF has no chat template: chats are formatted by llama.cpp's built-in "gemma" template
(llama_chat_apply_template), then tokenized by llama.cpp with special tokens parsed and BOS added
as the GGUF asks. Plain completions are tokenized the same way. For each: the prompt ids, the
greedy tokens (until an end-of-generation token, at most MAX_TOKENS) and the top-5 (id, logit) at
each greedy step.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np

from bench.llamacpp_figures import LlamaCpp
from services.modelstore.pull import GEMMA3_270M, pull

OUT = Path(__file__).parent / "gemma3-270m-q4_k_m.llamacpp.json"
MAX_TOKENS = 24
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Answer in one short sentence."},
     {"role": "user", "content": "Why is the sky blue?"}],
]
# Questions whose first answer tokens llama.cpp picks by a clear margin (>= 1.0), so that a served
# greedy answer has a prefix that must equal llama.cpp's.
COMPLETIONS = ["Question: What is 2 + 2?\nAnswer:", "Question: Who painted the Mona Lisa?\nAnswer:",
               "Question: What is the largest planet in the solar system?\nAnswer:"]


def chat_text(lc, messages) -> str:
    arr = (lc.llama_chat_message * len(messages))()
    keep = []
    for m, msg in zip(arr, messages):
        keep += [msg["role"].encode(), msg["content"].encode()]
        m.role, m.content = keep[-2], keep[-1]
    buf = ctypes.create_string_buffer(8192)
    n = lc.llama_chat_apply_template(b"gemma", arr, len(messages), True, buf, len(buf))
    return buf.raw[:n].decode()


def tokenize(lc, vocab, text: str) -> list[int]:
    raw = text.encode()
    out = (lc.llama_token * (len(raw) + 8))()
    n = lc.llama_tokenize(vocab, raw, len(raw), out, len(out), True, True)    # add_special, parse_special
    return list(out[:n])


def greedy(lc, llm: LlamaCpp, vocab, prompt: list[int]) -> dict:
    ctx = llm.context(1, 512, 256)
    try:
        n_vocab = lc.llama_vocab_n_tokens(vocab)
        ctx.decode([(0, tok, p, p == len(prompt) - 1) for p, tok in enumerate(prompt)])
        ids, steps = [], []
        for step in range(MAX_TOKENS):
            row = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx.ctx, -1), shape=(n_vocab,)).astype(np.float64)
            top = np.argsort(-row, kind="stable")[:5]
            steps.append([[int(i), float(row[i])] for i in top])
            ids.append(int(top[0]))
            if lc.llama_vocab_is_eog(vocab, ids[-1]):
                break
            ctx.decode([(0, ids[-1], len(prompt) + step, True)])
        return {"prompt_ids": prompt, "greedy_ids": ids, "greedy_steps_top5": steps}
    finally:
        ctx.close()


def main() -> None:
    import llama_cpp as lc  # noqa: PLC0415 - optional: the `bench` extra

    path = pull(GEMMA3_270M)
    llm = LlamaCpp(lc, path, threads=2)
    vocab = lc.llama_model_get_vocab(llm.model)
    out = {"model": path.name, "sha256": GEMMA3_270M.sha256,
           "reference": f"llama.cpp via llama-cpp-python {lc.__version__}, CPU, n_threads=2, template 'gemma'",
           "chats": [], "completions": []}
    for messages in CHATS:
        text = chat_text(lc, messages)
        out["chats"].append({"messages": messages, "prompt": text, **greedy(lc, llm, vocab, tokenize(lc, vocab, text))})
    for text in COMPLETIONS:
        out["completions"].append({"prompt": text, **greedy(lc, llm, vocab, tokenize(lc, vocab, text))})
    llm.close()
    for item in out["chats"] + out["completions"]:
        ids = item["greedy_ids"]
        buf = ctypes.create_string_buffer(4096)
        n = lc.llama_detokenize(vocab, (lc.llama_token * len(ids))(*ids), len(ids), buf, len(buf), False, False)
        item["greedy_text"] = buf.raw[:n].decode(errors="replace")
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
