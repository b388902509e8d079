"""A tiny llama in Q4_K_M, Q5_K_M, Q6_K and Q8_0 mixes (Q4_K_M with a Q5_0, a Q5_1 and a Q8_0 tensor
too) against llama.cpp's teacher-forced logits on the same file, in one process and across 3
shards; and a K-quant shard holds the GGUF's bytes, not a dequantized copy. The GGUFs are rebuilt
here from their recipe (tests/modelstore/kquant_gguf.py) and checked against the hashes of the
files the references were made from (tests/modelstore/make_kquant_reference.py)."""

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from kernels.qmatrix import QUANTIZED
from services.modelstore.quantized import QLayers, QStack
from services.modelstore.weight_cache import load_weights
from services.shard.kv_cache import KVConfig, PagedKVCache
from tests.modelstore.kquant_gguf import MIXES, tokenizer_fields, write_kquant_llama
from tests.modelstore.kquant_run import parity, sub_range, teacher_forced
from tests.modelstore.make_kquant_reference import sha256

REFERENCE = Path(__file__).resolve().parent.parent / "data" / "kquant-tiny.llamacpp.json"
SPLITS = (1, 3)                                    # 3 shards: layers [0, 1), [1, 3), [3, 4)


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module")
def files(model_path, tmp_path_factory, reference) -> dict:
    """mix -> the rebuilt GGUF, after checking it is byte for byte the one llama.cpp read."""
    tok = tokenizer_fields(model_path)
    tmp = tmp_path_factory.mktemp("kquant")
    out = {}
    for mix in MIXES:
        path = write_kquant_llama(tmp / f"{mix}.gguf", mix, tok)
        assert sha256(path) == reference["files"][mix]["sha256"], (
            f"the {mix} recipe no longer gives the file the references were made from (a gguf or numpy "
            "change?): run python -m tests.modelstore.make_kquant_reference where llama-cpp-python is installed")
        out[mix] = path
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One weight cache for the module: each file is read from its GGUF once."""
    return tmp_path_factory.mktemp("kquant-cache")


@pytest.mark.parametrize("mix", MIXES)
def test_teacher_forced_logits_follow_llama_cpp(mix, files, reference, cache):
    top5 = reference["files"][mix]["top5"]
    tokens = reference["tokens"]
    for splits in ((), SPLITS):
        got = parity(teacher_forced(files[mix], tokens, splits, root=cache), top5)
        print(f"\n{mix} {len(splits) + 1} shard(s) vs llama.cpp: {got}")
        assert got.sure > 0 and got.holds(), f"{mix}, {len(splits) + 1} shard(s): {got}"


def test_a_q4_k_m_shard_holds_the_gguf_bytes_of_its_range(files, cache):
    """Every matrix stays in its blocks (mixed kinds included), so what each of 3 shards holds is its
    range's bytes in the GGUF plus its KV cache, within 10%."""
    path = files["q4_k_m"]
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
    loaded = load_weights(path, 0, 4, "quantized", root=cache)
    cfg = loaded.config
    edges = (0,) + SPLITS + (cfg.n_layers,)
    for a, b in zip(edges, edges[1:]):
        w = sub_range(loaded.weights, a, b, cfg.n_layers)
        for name in ("wqkv", "wo", "w_gate_up", "w_down"):
            m = getattr(w, name)
            assert isinstance(m, (QStack, QLayers)) and all(isinstance(m[i], QUANTIZED) for i in range(len(m)))
        assert isinstance(w.output, QUANTIZED) or w.output is None
        kv = PagedKVCache.for_model(cfg, a, b, KVConfig(64, 16))
        in_file = sum(n for name, n in sizes.items()
                      if (name.startswith("blk.") and a <= int(name.split(".")[1]) < b)
                      or (a == 0 and name == "token_embd.weight")
                      or (b == cfg.n_layers and name in ("output_norm.weight", "output.weight")))
        held = w.nbytes() + kv.k.nbytes + kv.v.nbytes
        want = in_file + kv.k.nbytes + kv.v.nbytes
        assert abs(held - want) <= 0.1 * want, (a, b, held, want)
        assert np.float32 == w.wqkv.dtype
