"""Every supported architecture through the GPU forward, against llama.cpp's logits on the same
files: the tiny models of tests/engine/arch_gguf.py (in one shard) and their K-quant mixes (across
three), with the bounds the CPU's forward meets (tests/modelstore/kquant_run.Parity): top-1 equal
wherever llama.cpp's margin is 1.0, top-5 logits within 1.0, 0.35 on average. The Q4_K_M and Q5_K_M
mixes hold every K kind the device reads (Q4_K, Q5_K, Q6_K) and Q8_0, and the Q5_0 and Q5_1
fallbacks, which go up as float16 (the Q6_K and Q8_0 mixes pass too: 40 cases, a minute)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from services.modelstore.weight_cache import load_weights
from services.shard.gpu_model import GpuShardModel
from services.shard.inprocess import Chunk, PageAllocator, Pipeline, build_batch
from services.shard.kv_cache import KVConfig
from tests.engine.arch_gguf import KSPECS, SPECS, write
from tests.engine.teacher import margins, teacher_forced
from tests.modelstore.kquant_run import _n_layers, parity, sub_range

REFS = json.loads((Path(__file__).parents[1] / "data" / "arch_refs.llamacpp.json").read_text())["models"]


def pipeline(dev, path: Path, root: Path, splits=()) -> Pipeline:
    n = _n_layers(path)
    q = load_weights(path, 0, n, "quantized", root=root)
    edges = (0, *splits, n)
    return Pipeline([GpuShardModel(q.config, sub_range(q.weights, a, b, n), KVConfig(16, 16), dev)
                     for a, b in zip(edges, edges[1:])])


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_architecture_follows_llama_cpp(dev, name, tmp_path, model_path):
    ref = REFS[name]
    logits = teacher_forced(pipeline(dev, write(tmp_path / f"{name}.gguf", name, model_path), tmp_path).forward, ref)
    top5 = ref["greedy_steps_top5"]
    ids = np.array([[t[0] for t in s] for s in top5])
    want = np.array([[t[1] for t in s] for s in top5])
    sure = margins(ref) >= 1.0
    np.testing.assert_array_equal(logits.argmax(1)[sure], ids[sure, 0])
    d = np.abs(np.take_along_axis(logits, ids, 1) - want)
    print(f"\n{name} on {dev.name} vs llama.cpp: top-5 |diff| max {d.max():.3f} mean {d.mean():.3f}")
    assert d.max() <= 1.0 and d.mean() <= 0.35


@pytest.mark.parametrize("mix", ["q4_k_m", "q5_k_m"])
@pytest.mark.parametrize("name", sorted(KSPECS))
def test_each_k_quant_mix_follows_llama_cpp_across_three_shards(dev, name, mix, built, arch_reference, tmp_path):
    path = built(name, mix)
    n = _n_layers(path)
    chain = pipeline(dev, path, tmp_path, (n // 3, 2 * n // 3))
    pages = PageAllocator(16, 16)
    logits = np.array([chain.forward(build_batch([Chunk(0, [t], i)], pages))[0]
                       for i, t in enumerate(arch_reference["tokens"])])
    got = parity(logits, arch_reference["files"][f"{name}/{mix}"]["top5"])
    print(f"\n{name} {mix} on {dev.name} vs llama.cpp: {got}")
    assert got.sure >= 5 and got.holds(), got
