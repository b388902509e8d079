"""Make tests/data/arch_refs.llamacpp.json: llama.cpp's greedy run on each tiny architecture GGUF.

    python3 -m tests.data.make_arch_refs        # needs llama-cpp-python (the `bench` extra)

For each model of tests/engine/arch_gguf.SPECS (rebuilt from its seed with the default model's
vocabulary; the file's sha256 is stored so the test can check it rebuilt the same bytes): the
prompt ids, llama.cpp's greedy tokens after it, and at each greedy step the top-5 (id, logit).
Teacher-forced in llama.cpp itself: one llama_decode for the prompt, then one per greedy token.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.llamacpp_figures import LlamaCpp
from services.modelstore.pull import pull
from tests.engine.arch_gguf import SPECS, sha256, write

OUT = Path(__file__).parent / "arch_refs.llamacpp.json"
PROMPT = [504, 1073, 260, 1345, 30, 1616, 314, 1932, 28, 429, 357, 1011]   # ids of the cut vocabulary
STEPS = 12


def greedy(lc, path: Path) -> dict:
    llm = LlamaCpp(lc, path, threads=2)
    ctx = llm.context(1, 256, 64)
    try:
        n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(llm.model))
        ctx.decode([(0, tok, p, p == len(PROMPT) - 1) for p, tok in enumerate(PROMPT)])
        steps, ids = [], []
        for step in range(STEPS):
            row = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx.ctx, -1), shape=(n_vocab,)).astype(np.float64)
            top = np.argsort(-row, kind="stable")[:5]
            steps.append([[int(i), float(row[i])] for i in top])
            ids.append(int(top[0]))
            ctx.decode([(0, ids[-1], len(PROMPT) + step, True)])
        return {"prompt_ids": PROMPT, "greedy_ids": ids, "greedy_steps_top5": steps}
    finally:
        ctx.close()
        llm.close()


def main() -> None:
    import llama_cpp as lc  # noqa: PLC0415 - optional: the `bench` extra

    vocab = pull()
    out = {"reference": f"llama.cpp via llama-cpp-python {lc.__version__}, CPU, n_threads=2",
           "vocabulary": vocab.name, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(SPECS):
            path = write(Path(tmp) / f"{name}.gguf", name, vocab)
            out["models"][name] = {"sha256": sha256(path), **greedy(lc, path)}
            print(name, out["models"][name]["greedy_ids"], file=sys.stderr)
    OUT.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
