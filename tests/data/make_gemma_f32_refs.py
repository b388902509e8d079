"""Make tests/data/gemma3-270m-f32.llamacpp.json: llama.cpp's logits on Gemma 3 270M with every weight
dequantized to float32, teacher-forced along the Q4_K_M reference's greedy answers.

    llmbus pull gemma3-270m-q4_k_m && python3 -m tests.data.make_gemma_f32_refs    # needs llama-cpp-python

The Q4_K_M file's tensors are dequantized by the gguf package into an F32 GGUF (same metadata), and
llama.cpp runs it with flash attention off and an F32 KV cache: no 8-bit activations, no float16
anywhere but ggml's GELU table. What is left is the architecture's arithmetic in float32, which is
what these references pin down (the Q4_K_M references cannot: see tests/serve/test_gemma3_270m.py).
For each reference item: the top-5 (id, logit) at each teacher-forced step.
"""

from __future__ import annotations

import json
import tempfile
from importlib.metadata import version
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import dequantize

from bench.llamacpp_figures import Context, LlamaCpp
from services.modelstore.pull import GEMMA3_270M, pull

Q4 = Path(__file__).parent / "gemma3-270m-q4_k_m.llamacpp.json"
OUT = Path(__file__).parent / "gemma3-270m-f32.llamacpp.json"


def write_f32(src: Path, dst: Path) -> None:
    """`src` with every tensor dequantized to float32, metadata copied (file type set to ALL_F32)."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch=str(r.fields["general.architecture"].contents()))
    for f in r.fields.values():
        if f.name in ("general.architecture", "general.file_type") or f.name.startswith("GGUF."):
            continue
        kind = f.types[0]
        w.add_key_value(f.name, f.contents(), kind, sub_type=f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    arrays = [(t.name, dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(n) for n in reversed(t.shape)]))
              for t in r.tensors]
    for name, a in arrays:
        w.add_tensor_info(name, a.shape, a.dtype, a.nbytes, gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, a in arrays:
        w.write_tensor_data(a)
    w.close()


def teacher_forced_top5(lc, llm: LlamaCpp, item: dict) -> list:
    """Top-5 (id, logit) at each step of `item`: its prompt, then its greedy tokens one by one."""
    cp = lc.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 512, 256, 256, 1
    cp.n_threads = cp.n_threads_batch = llm.threads
    cp.flash_attn_type, cp.type_k, cp.type_v = 0, 0, 0           # off; GGML_TYPE_F32 K and V
    ctx = lc.llama_init_from_model(llm.model, cp)
    c = Context(lc, ctx, 256, 1)
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(llm.model))
    prompt, greedy = item["prompt_ids"], item["greedy_ids"]
    steps = []
    try:
        for step in range(len(item["greedy_steps_top5"])):
            if step == 0:
                c.decode([(0, tok, p, p == len(prompt) - 1) for p, tok in enumerate(prompt)])
            else:
                c.decode([(0, greedy[step - 1], len(prompt) + step - 1, True)])
            row = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).astype(np.float64)
            steps.append([[int(i), float(row[i])] for i in np.argsort(-row, kind="stable")[:5]])
    finally:
        lc.llama_batch_free(c.batch)
        lc.llama_free(ctx)
    return steps


def main() -> None:
    import llama_cpp as lc  # noqa: PLC0415 - optional: the `bench` extra

    ref = json.loads(Q4.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        f32 = Path(tmp) / "gemma-3-270m-f32.gguf"
        write_f32(pull(GEMMA3_270M), f32)
        llm = LlamaCpp(lc, f32, threads=2)
        items = [{"prompt_ids": it["prompt_ids"], "greedy_ids": it["greedy_ids"],
                  "steps_top5": teacher_forced_top5(lc, llm, it)} for it in ref["chats"] + ref["completions"]]
        llm.close()
    out = {"model": f"{ref['model']} (sha256 {GEMMA3_270M.sha256}) dequantized to F32 by gguf {version('gguf')}",
           "reference": f"llama.cpp via llama-cpp-python {lc.__version__}, CPU, n_threads=2, "
                        "flash attention off, F32 KV cache, teacher-forced along " + Q4.name,
           "items": items}
    OUT.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
