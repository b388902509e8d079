"""Make tests/data/kquant-tiny.llamacpp.json: llama.cpp's teacher-forced top-5 logits on the tiny
K-quant GGUFs of kquant_gguf.py, and (printed, for the record) how our engine compares with llama.cpp
on the same tiny model quantized by llama.cpp's own quantizer.

    python -m tests.modelstore.make_kquant_reference [--out tests/data/kquant-tiny.llamacpp.json]
    python -m tests.modelstore.make_kquant_reference --real   # prints only: a real model, see real_model()
    python -m tests.modelstore.make_kquant_reference --arch [--out tests/data/arch-kquant.llamacpp.json]

--arch: the same for every tiny architecture of tests/engine/arch_gguf.KSPECS in each mix.

Needs llama-cpp-python (pip install .[bench]) and the default model (for its tokenizer metadata).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np

from tests.modelstore.kquant_gguf import MIXES, SEED, tokenizer_fields, write_kquant_llama
from tests.modelstore.kquant_run import parity, teacher_forced

OUT = Path(__file__).resolve().parent.parent / "data" / "kquant-tiny.llamacpp.json"
ARCH_OUT = OUT.parent / "arch-kquant.llamacpp.json"
N_TOKENS = 40
THREADS = 2
# llama.cpp's file types (llama.h's LLAMA_FTYPE_MOSTLY_*) for its quantizer.
FTYPES = {"q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "q8_0": 7}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def llama_cpp_logits(path: Path, tokens: list[int]) -> np.ndarray:
    """llama.cpp's logits at every position of `tokens` fed as one prompt (teacher-forced)."""
    from llama_cpp import Llama
    llm = Llama(model_path=str(path), n_ctx=128, n_batch=128, n_threads=THREADS, logits_all=True, verbose=False)
    llm.eval(tokens)
    return np.array(llm.scores[:len(tokens)], dtype=np.float32)


def top5(logits: np.ndarray) -> list:
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :5]
    return [[[int(i), round(float(row[i]), 5)] for i in r] for r, row in zip(ids, logits)]


def llama_quantized(src: Path, label: str, tokens: list[int], splits: tuple[int, ...], cache: Path) -> None:
    """`src` (float32 matrices) through llama.cpp's quantizer into each file type: our logits against
    llama.cpp's on each (printed only: a test cannot rebuild these files without llama.cpp)."""
    import llama_cpp
    for mix, ftype in FTYPES.items():
        dst = src.with_name(f"{src.stem}-llama.cpp-{mix}.gguf")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.nthread = THREADS
        if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
            raise RuntimeError(f"llama.cpp could not quantize {label} to {mix}")
        ref = top5(llama_cpp_logits(dst, tokens))
        one, three = (teacher_forced(dst, tokens, s, root=cache) for s in ((), splits))
        print(f"{label:12s} llama.cpp-quantized {mix:7s} one process: {parity(one, ref)}\n"
              f"{'':40s} 3 shards:    {parity(three, ref)}")


def real_model(tmp: Path, steps: int = 24) -> None:
    """The default model requantized by llama.cpp to Q4_K_M (576 columns are not whole super-blocks,
    so llama.cpp falls back to Q5_0 for most of it and Q8_0 for some v: Q4_K and Q6_K are its
    ffn_down), teacher-forced on each reference chat's prompt and llama.cpp's own greedy tokens."""
    import llama_cpp
    from llama_cpp import Llama
    from services.modelstore.pull import pull
    src, dst = pull(), tmp / "smollm2-135m-q4_k_m.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread, params.allow_requantize = FTYPES["q4_k_m"], THREADS, True
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise RuntimeError("llama.cpp could not requantize the default model")
    chats = json.loads((OUT.parent / "smollm2-135m-q4_1.llamacpp.json").read_text())["chats"]
    llm = Llama(model_path=str(dst), n_ctx=512, n_batch=512, n_threads=THREADS, logits_all=True, verbose=False)
    for chat in chats:
        prompt = chat["prompt_ids"]
        greedy = []
        llm.reset()
        llm.eval(prompt)
        for _ in range(steps):
            greedy.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([greedy[-1]])
        seq = prompt + greedy
        ref = top5(np.array(llm.scores[:len(seq)], dtype=np.float32))
        one = teacher_forced(dst, seq, root=tmp / "cache")
        three = teacher_forced(dst, seq, (10, 20), root=tmp / "cache")
        print(f"{dst.name} chat of {len(prompt)} + {steps} tokens: one process {parity(one, ref)}; "
              f"3 shards {parity(three, ref)}")


def arch_mixes(out: Path) -> None:
    """llama.cpp's teacher-forced top-5 on every tiny architecture (arch_gguf.KSPECS) in every mix."""
    import llama_cpp
    from services.modelstore.pull import pull
    from tests.engine.arch_gguf import KSPECS, VOCAB, write
    vocab = pull()
    tokens = np.random.default_rng(SEED).integers(0, VOCAB, N_TOKENS).tolist()
    files = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, spec in sorted(KSPECS.items()):
            splits = (spec.n_layers // 3, 2 * spec.n_layers // 3)
            for mix in MIXES:
                path = write(tmp / f"{name}-{mix}.gguf", name, vocab, mix)
                ref = top5(llama_cpp_logits(path, tokens))
                files[f"{name}/{mix}"] = {"sha256": sha256(path), "top5": ref}
                one, three = (teacher_forced(path, tokens, s, root=tmp / "cache") for s in ((), splits))
                print(f"{name:12s} {mix:7s} one process: {parity(one, ref)}\n{'':20s} 3 shards:    {parity(three, ref)}")
            llama_quantized(write(tmp / f"{name}-f32.gguf", name, vocab, "f32"), name, tokens, splits, tmp / "cache")
    out.write_text(json.dumps({
        "recipe": f"tests/engine/arch_gguf.py write(path, name, default model, mix) for each name of KSPECS; "
                  f"tokens: numpy default_rng({SEED}).integers(0, {VOCAB}, {N_TOKENS})",
        "reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}, CPU, n_threads={THREADS}, "
                     "teacher-forced (the tokens as one prompt, logits_all)",
        "tokens": tokens, "files": files}, indent=None) + "\n")
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--real", action="store_true", help="only print the requantized default model's figures")
    ap.add_argument("--arch", action="store_true", help="every tiny architecture in every mix")
    args = ap.parse_args()
    if args.arch:
        arch_mixes(args.out or ARCH_OUT)
        return
    args.out = args.out or OUT
    if args.real:
        with tempfile.TemporaryDirectory() as d:
            real_model(Path(d))
        return
    import llama_cpp
    from services.modelstore.pull import pull
    tok = tokenizer_fields(pull())
    tokens = np.random.default_rng(SEED).integers(0, len(tok["tokenizer.ggml.tokens"]), N_TOKENS).tolist()
    files = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for mix in MIXES:
            path = write_kquant_llama(tmp / f"{mix}.gguf", mix, tok)
            ref = top5(llama_cpp_logits(path, tokens))
            files[mix] = {"sha256": sha256(path), "top5": ref}
            one, three = (teacher_forced(path, tokens, s, root=tmp / "cache") for s in ((), (1, 3)))
            print(f"{mix:7s} one process: {parity(one, ref)}\n{'':7s} 3 shards:    {parity(three, ref)}")
        llama_quantized(write_kquant_llama(tmp / "f32.gguf", "f32", tok), "llama", tokens, (1, 3), tmp / "cache")
    args.out.write_text(json.dumps({
        "recipe": f"tests/modelstore/kquant_gguf.py write_kquant_llama(path, mix, tokenizer_fields(default model), "
                  f"seed={SEED}); tokens: numpy default_rng({SEED}).integers(0, vocab, {N_TOKENS})",
        "reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}, CPU, n_threads={THREADS}, "
                     "teacher-forced (the tokens as one prompt, logits_all)",
        "tokens": tokens, "files": files}, indent=None) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
