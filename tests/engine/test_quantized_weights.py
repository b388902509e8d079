"""Weights kept in GGUF's quantized blocks: the same numbers as dequantizing, a sixth of the bytes."""

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from kernels.qmatrix import QMatrix, QRows
from services.modelstore.quantized import QLayers, QStack
from services.modelstore.weight_cache import load_weights
from services.modelstore.weights import read_weights
from services.shard.kv_cache import KVConfig, PagedKVCache
from services.shard.inprocess import Chunk, PageAllocator, build_batch
from services.shard.model import ShardModel
from tests.engine.tiny_gguf import TINY, write_tiny_llama

MATRICES = ("wqkv", "wo", "w_gate_up", "w_down")


@pytest.fixture(scope="module")
def q4_1_path(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("q") / "q4_1.gguf", qtype=QT.Q4_1, tied=True)


@pytest.mark.parametrize("qtype,kind", [(QT.Q4_1, "q4_1"), (QT.Q4_0, "q4_0"), (QT.Q8_0, "q8_0")])
def test_blocks_dequantize_to_exactly_the_float_weights(tmp_path, qtype, kind):
    path = write_tiny_llama(tmp_path / "m.gguf", qtype=qtype)
    _, fw = read_weights(path, 0, 3)
    _, qw = read_weights(path, 0, 3, quantized=True)
    for name in MATRICES:
        stack = getattr(qw, name)
        assert isinstance(stack, QStack) and stack.kind == kind and stack.shape == getattr(fw, name).shape
        for i in range(len(stack)):
            np.testing.assert_array_equal(stack[i].dequantize(), getattr(fw, name)[i])
    assert isinstance(qw.token_embd, QMatrix) and qw.token_embd.kind == "q8_0"   # the tiny embedding is Q8_0
    np.testing.assert_array_equal(qw.token_embd.dequantize(), fw.token_embd)
    assert isinstance(qw.attn_norm, np.ndarray) and isinstance(qw.output, np.ndarray)   # F32 norms, F16 head
    assert qw.nbytes() < fw.nbytes() / 2


def test_kinds_without_a_kernel_are_dequantized(tmp_path):
    _, w = read_weights(write_tiny_llama(tmp_path / "m.gguf", qtype=QT.BF16), 0, 3, quantized=True)
    assert all(isinstance(getattr(w, n), np.ndarray) for n in MATRICES)


def test_a_fused_matrix_of_mixed_kinds_keeps_each_part_in_its_blocks(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf", qtype=QT.Q4_1, odd_tensor_type=QT.Q8_0)   # attn_q differs
    _, fw = read_weights(path, 0, 3)
    _, qw = read_weights(path, 0, 3, quantized=True)
    assert isinstance(qw.wqkv, QLayers) and isinstance(qw.wo, QStack)
    for i in range(3):
        assert isinstance(qw.wqkv[i], QRows) and [p.kind for p in qw.wqkv[i].parts] == ["q8_0", "q4_1"]
        np.testing.assert_array_equal(qw.wqkv[i].dequantize(), fw.wqkv[i])


def test_cache_entry_round_trip_stores_a_tied_head_once(q4_1_path, tmp_path):
    cold = load_weights(q4_1_path, 0, 3, "quantized", root=tmp_path)
    warm = load_weights(q4_1_path, 0, 3, "quantized", root=tmp_path)
    assert cold.cold and not warm.cold and warm.path.name == "0-3-quantized-v3"
    for name in MATRICES:
        a, b = getattr(cold.weights, name), getattr(warm.weights, name)
        assert isinstance(b, QStack) and b.kind == a.kind
        np.testing.assert_array_equal(b.data, a.data)
    assert warm.weights.output is warm.weights.token_embd
    manifest = json.loads((warm.path / "manifest.json").read_text())
    assert manifest["aliases"] == {"output": "token_embd"} and not (warm.path / "output.npy").exists()
    np.testing.assert_array_equal(warm.weights.output.data, cold.weights.token_embd.data)


def test_quantized_weights_do_not_move_to_a_device(q4_1_path):
    _, w = read_weights(q4_1_path, 0, 3, quantized=True)
    with pytest.raises(TypeError, match="quantized"):
        w.to(np, np.float16)


def _forward(path, fmt, start, end, root, chunks, hidden=None):
    loaded = load_weights(path, start, end, fmt, root=root)
    kv = PagedKVCache.for_model(loaded.config, start, end, KVConfig(16, 16))
    model = ShardModel(loaded.config, loaded.weights, kv)
    batch = build_batch(chunks, PageAllocator(16, 16))
    if hidden is not None:
        batch.tokens, batch.hidden = None, hidden
    return model.forward(batch)


def test_forward_over_blocks_follows_the_float_forward_with_8_bit_activations(q4_1_path, tmp_path):
    """Two sequences, prefill and a decode, through a two-shard split and whole, in both formats: the
    split changes nothing, and the blocks' 8-bit activations move logits by about 1% of their range."""
    rng = np.random.default_rng(0)
    # b is a single-token row (the decode path) from position 0: a fresh cache holds no earlier keys.
    chunks = [Chunk("a", rng.integers(0, TINY["vocab"], 9).tolist(), 0), Chunk("b", [5], 0)]
    out = {}
    for fmt in ("float32", "quantized"):
        h = _forward(q4_1_path, fmt, 0, 2, tmp_path, chunks)
        assert h.dtype == np.float32
        out[fmt] = _forward(q4_1_path, fmt, 2, 3, tmp_path, chunks, hidden=h)
        np.testing.assert_array_equal(out[fmt], _forward(q4_1_path, fmt, 0, 3, tmp_path, chunks))
    q, f = out["quantized"], out["float32"]
    assert q.dtype == np.float32 and q.shape == (2, TINY["vocab"])
    assert 0 < np.abs(q - f).max() <= 0.03 * (f.max() - f.min()), np.abs(q - f).max() / (f.max() - f.min())
