"""Every supported architecture on a tiny random GGUF: against llama.cpp's logits on the same file
(tests/data/arch_refs.llamacpp.json, made by tests/data/make_arch_refs.py) and against a plain
float64 forward of its own (tests/engine/naive_arch.py), in one shard and across three."""

import json
from pathlib import Path

import numpy as np
import pytest

from services.modelstore.gguf_config import UnsupportedModel
from services.modelstore.weight_cache import load_weights
from services.modelstore.weights import ShardWeights, read_config
from services.shard.array_layers import ArrayLayers
from services.shard.native_layers import NativeLayers
from services.shard.numpy_layers import NumpyLayers
from services.shard.inprocess import Chunk, PageAllocator, Pipeline, build_batch
from tests.conftest import require
from tests.engine import naive_arch
from tests.engine.arch_gguf import SPECS, sha256, write
from tests.engine.conftest import make_shard
from tests.engine.teacher import margins, teacher_forced

REFS = json.loads((Path(__file__).parent.parent / "data" / "arch_refs.llamacpp.json").read_text())["models"]

# Past position 5 gemma3's local layers (window 5) drop keys; pages of 4 make every step cross pages.
TOKENS = [5, 17, 990, 3, 42, 42, 7, 640, 1, 100, 23, 8, 15, 16, 77, 2, 9, 31, 54, 1200]
PROMPT = 7
# Both round k and v to float16 where the cache stores them, but now and then the engine's float32 k
# and the plain forward's float64 one round to neighbouring float16s: one float16 ulp (2^-11 of the
# value) of a key moves these logits by up to ~2e-3. The engine's GELU is llama.cpp's float16 table,
# the plain forward's is exact: 1.4e-3 apart at worst.
TOLERANCE = {"gemma3": 5e-3}
KV_TOLERANCE = 5e-3


@pytest.fixture(scope="module", params=sorted(SPECS))
def tiny(request, tmp_path_factory, model_path):
    name = request.param
    path = write(tmp_path_factory.mktemp(name) / f"{name}.gguf", name, model_path)
    # The references were made on a file of exactly these bytes (else: rerun make_arch_refs).
    assert sha256(path) == REFS[name]["sha256"], f"{name}: the rebuilt GGUF differs from the reference's"
    return name, path, naive_arch.logits(path, TOKENS)


def test_teacher_forced_against_llama_cpp_in_one_shard_and_across_three(tiny, tmp_path):
    """The CPU default (GGUF blocks, 8-bit activations): the bounds the default model meets."""
    name, path, _ = tiny
    ref, n = REFS[name], SPECS[name].n_layers
    one = make_shard(load_weights(path, 0, n, "quantized", root=tmp_path))
    logits = teacher_forced(one.forward, ref)
    ids = np.array([[t[0] for t in step] for step in ref["greedy_steps_top5"]])    # (steps, 5)
    want = np.array([[t[1] for t in step] for step in ref["greedy_steps_top5"]])
    sure = margins(ref) >= 1.0
    assert sure.sum() >= 3, "the reference has too few clear steps to check top-1 on"
    np.testing.assert_array_equal(logits.argmax(1)[sure], ids[sure, 0])
    d = np.abs(np.take_along_axis(logits, ids, 1) - want)
    print(f"\n{name} vs llama.cpp: top-5 |logit diff| max {d.max():.4f}, mean {d.mean():.4f}, "
          f"{sure.sum()} of {sure.size} steps sure")
    assert d.max() <= 1.0 and d.mean() <= 0.35, (d.max(), d.mean())
    cuts = [0, n // 3, 2 * n // 3, n]
    shards = [make_shard(load_weights(path, a, b, "quantized", root=tmp_path)) for a, b in zip(cuts, cuts[1:])]
    np.testing.assert_array_equal(teacher_forced(Pipeline(shards).forward, ref), logits)


def _prefill_then_decode(forward, pages: PageAllocator) -> np.ndarray:
    out = [forward(build_batch([Chunk("a", TOKENS[:PROMPT], 0)], pages))[0]]
    for i in range(PROMPT, len(TOKENS)):
        out.append(forward(build_batch([Chunk("a", [TOKENS[i]], i)], pages))[0])
    return np.array(out)


def test_one_shard_and_three_match_the_plain_forward(tiny, tmp_path):
    name, path, want = tiny
    n = SPECS[name].n_layers
    one = make_shard(path, 0, n, num_pages=16, page_size=4, root=tmp_path)
    got = _prefill_then_decode(one.forward, PageAllocator(16, 4))
    tol = TOLERANCE.get(name, KV_TOLERANCE)
    np.testing.assert_allclose(got, want[PROMPT - 1:], rtol=tol, atol=tol)
    cuts = [0, n // 3, 2 * n // 3, n]
    pipe = Pipeline([make_shard(path, a, b, num_pages=16, page_size=4, root=tmp_path) for a, b in zip(cuts, cuts[1:])])
    np.testing.assert_array_equal(_prefill_then_decode(pipe.forward, PageAllocator(16, 4)), got)


@pytest.mark.parametrize("runner", ["array", "numpy"])
def test_op_by_op_layers_match_the_plain_forward(tiny, tmp_path, runner):
    """The op-by-op definition (ArrayLayers) and the loop of a CPU without the C library: prompt rows
    attend together (with the sliding window as a mask), decode rows through a bias or the pages."""
    name, path, want = tiny
    n = SPECS[name].n_layers
    loaded = load_weights(path, 0, n, root=tmp_path)
    shard = make_shard(loaded, num_pages=16, page_size=4)
    w = loaded.weights.arrays()
    extras = [{k: w[k][i] for k in ShardWeights.LAYER_EXTRAS if k in w} for i in range(n)]
    layers = shard.runner.layers
    shard.runner = (ArrayLayers(np, shard.config, layers, shard.kv, 0, split=True, extras=extras) if runner == "array"
                    else NumpyLayers(shard.config, layers, shard.kv, 0, extras=extras))
    got = _prefill_then_decode(shard.forward, PageAllocator(16, 4))
    tol = TOLERANCE.get(name, KV_TOLERANCE)
    np.testing.assert_allclose(got, want[PROMPT - 1:], rtol=tol, atol=tol)


def test_the_native_loop_gives_the_numpy_loops_bits(tiny, tmp_path):
    """The C library's layer loop (biases, q/k norms, GELU gate and sliding window in C) against the numpy
    loop with every row attending alone: the same logits bit for bit, prompt rows and decode rows past
    gemma3's window of 5 included."""
    name, path, _ = tiny
    n = SPECS[name].n_layers
    loaded = load_weights(path, 0, n, "quantized", root=tmp_path)
    native, numpy = make_shard(loaded, num_pages=16, page_size=4), make_shard(loaded, num_pages=16, page_size=4)
    require(isinstance(native.runner, NativeLayers), "the native library is not built (pip install -e . with a C "
            "compiler builds it)")
    w = loaded.weights.arrays()
    extras = [{k: w[k][i] for k in ShardWeights.LAYER_EXTRAS if k in w} for i in range(n)]
    numpy.runner = NumpyLayers(numpy.config, numpy.runner.layers, numpy.kv, 0, rows_alone=True, extras=extras)
    np.testing.assert_array_equal(_prefill_then_decode(native.forward, PageAllocator(16, 4)),
                                  _prefill_then_decode(numpy.forward, PageAllocator(16, 4)))
    # every step was one call into C: no Python between any architecture's ops (kernels.program)
    programs = [p for s in native.runner.scratches.values() for p in s.programs.values()]
    assert programs and all(p.calls_into_c() == 1 and not p.python_steps() for p in programs)


def test_the_description_is_read_from_metadata(tiny):
    name, path, _ = tiny
    config, _ = read_config(path)
    assert config.arch == SPECS[name].arch and config.head_dim == SPECS[name].head_dim
    if name == "llama3":
        assert config.rope_freqs is not None and max(config.rope_freqs) == 8.0
    if name == "llama-yarn":
        assert (config.yarn_orig_ctx, config.rope_freq_scale) == (64, 0.25)
    if name == "gemma3":
        assert config.sliding_window == 5 and config.rope_base_swa == 10000.0
        assert [config.is_local(i) for i in range(6)] == [True] * 5 + [False]


def test_phi3_longrope_is_refused_by_name(tmp_path, model_path):
    from gguf import GGUFReader  # noqa: PLC0415
    from services.modelstore.gguf_config import config_from_gguf  # noqa: PLC0415

    path = write(tmp_path / "phi3.gguf", "phi3", model_path)
    reader = GGUFReader(str(path))

    class WithLongRope:
        fields, tensors = reader.fields, [*reader.tensors, type("T", (), {"name": "rope_factors_long.weight"})()]

    with pytest.raises(UnsupportedModel, match="LongRoPE"):
        config_from_gguf(WithLongRope)


