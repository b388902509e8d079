"""Every tiny architecture (tests/engine/arch_gguf.KSPECS) in the Q4_K_M, Q5_K_M, Q6_K and Q8_0 mixes
of tests/modelstore/kquant_gguf.py, teacher-forced against llama.cpp's logits on the same file
(tests/data/arch-kquant.llamacpp.json, made by `python -m tests.modelstore.make_kquant_reference
--arch`), in one process and across 3 shards, with the bounds the default model meets."""

from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader

from tests.engine.arch_gguf import KSPECS
from tests.modelstore.kquant_gguf import MIXES
from tests.modelstore.kquant_run import parity, teacher_forced


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One weight cache for the module: each file is read from its GGUF once."""
    return tmp_path_factory.mktemp("arch-kquant-cache")


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("name", sorted(KSPECS))
def test_teacher_forced_logits_follow_llama_cpp(name, mix, shards, built, cache, arch_reference):
    n = KSPECS[name].n_layers
    splits = () if shards == 1 else (n // 3, 2 * n // 3)
    ref = arch_reference["files"][f"{name}/{mix}"]["top5"]
    got = parity(teacher_forced(built(name, mix), arch_reference["tokens"], splits, root=cache), ref)
    print(f"\n{name} {mix} {shards} shard(s) vs llama.cpp: {got}")
    assert got.sure >= 5 and got.holds(), f"{name} {mix}, {shards} shard(s): {got}"


def test_rows_not_whole_super_blocks_fall_back_as_llama_cpp_does(built):
    """qwen3's attn_output rows are 128 weights: Q5_0 where the rest is Q4_K, Q8_0 where Q6_K."""
    for mix, want in (("q4_k_m", {QT.Q5_0, QT.Q8_0}), ("q5_k_m", {QT.Q5_1}), ("q6_k", {QT.Q8_0})):
        kinds = {t.name: t.tensor_type for t in GGUFReader(str(built("qwen3", mix))).tensors}
        assert {kinds[f"blk.{i}.attn_output.weight"] for i in range(4)} == want, mix
        assert kinds["blk.1.attn_q.weight"] == {"q4_k_m": QT.Q4_K, "q5_k_m": QT.Q5_K, "q6_k": QT.Q6_K}[mix]
