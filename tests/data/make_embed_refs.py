"""Make tests/data/smollm2-135m-q4_1.embeddings.llamacpp.json: llama.cpp's embeddings of the default
model, the reference the served embeddings are checked against.

    llmbus pull && python3 -m tests.data.make_embed_refs        # needs llama-cpp-python

llama.cpp (llm_graph_context::build_pooling) pools `t_embd`, the hidden states after the model's
final norm (output_norm), and before the output head: mean pooling averages every token of the
sequence, the BOS that tokenization adds included (llama-cpp-python's `embed` tokenizes with
add_bos, special tokens not parsed); `last` takes the last token's row, `cls` the first's. The
GGUF of SmolLM2 names no pooling type, so ours is mean (llmbus's default); `last`
is recorded too. Vectors are stored raw (not normalized) with the prompt ids llama.cpp used.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from services.modelstore.pull import DEFAULT_MODEL, pull

OUT = Path(__file__).parent / "smollm2-135m-q4_1.embeddings.llamacpp.json"
INPUTS = [
    "The capital of Japan is Tokyo.",
    "Embeddings map text to vectors.",
    "a",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen; "
    "it happens in the chloroplasts of plant cells, and almost every food chain starts with it.",
]
POOLINGS = {"mean": 1, "last": 3}   # llama_pooling_type


def main() -> None:
    import llama_cpp

    path = pull(DEFAULT_MODEL)
    out = {"model": DEFAULT_MODEL.name, "inputs": INPUTS, "ids": [], "pooling": {}}
    for name, kind in POOLINGS.items():
        llm = llama_cpp.Llama(str(path), embedding=True, pooling_type=kind, n_ctx=512,
                              n_batch=512, n_ubatch=512, n_threads=1, verbose=False)
        vecs = []
        for text in INPUTS:
            ids = llm.tokenize(text.encode(), add_bos=True, special=False)
            if name == "mean":
                out["ids"].append([int(t) for t in ids])
            vec = np.asarray(llm.embed(text, normalize=False), np.float32)
            assert vec.ndim == 1, vec.shape
            vecs.append([float(x) for x in vec])
        out["pooling"][name] = vecs
        del llm
    OUT.write_text(json.dumps(out) + "\n")
    print(f"wrote {OUT} ({len(INPUTS)} inputs x {len(out['pooling']['mean'][0])} floats)")


if __name__ == "__main__":
    main()
