"""GGUF metadata and weights: config, layer ranges, refusals with typed errors."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from services.modelstore.gguf_config import UnsupportedArchitecture, UnsupportedModel
from services.modelstore.weights import BadLayerRange, UnsupportedTensorType, read_weights
from tests.engine.tiny_gguf import TINY, write_tiny_llama


def test_config_from_metadata(tiny_path):
    config, w = read_weights(tiny_path, 0, TINY["n_layers"])
    assert (config.arch, config.n_layers, config.d_model) == ("llama", 3, 64)
    assert (config.n_heads, config.n_kv_heads, config.head_dim, config.ffn_dim) == (4, 2, 16, 96)
    assert (config.vocab_size, config.rope_base, config.rope_dims) == (101, 10000.0, 16)
    assert not config.tied_output


def test_a_middle_range_reads_only_its_layers(tiny_path):
    config, w = read_weights(tiny_path, 1, 2)
    assert w.token_embd is None and w.output is None and w.output_norm is None
    assert w.wqkv.shape == (1, config.qkv_dim, 64) and w.w_gate_up.shape == (1, 2 * 96, 64)
    _, full = read_weights(tiny_path, 0, 3)
    np.testing.assert_array_equal(w.wqkv[0], full.wqkv[1])
    assert full.token_embd.shape == (101, 64) and full.output.shape == (101, 64)


def test_tied_head_is_the_embedding(tmp_path):
    path = write_tiny_llama(tmp_path / "tied.gguf", tied=True)
    config, w = read_weights(path, 0, 3)
    assert config.tied_output
    np.testing.assert_array_equal(w.output, w.token_embd)


@pytest.mark.parametrize("qtype", [QT.F32, QT.F16, QT.Q4_0, QT.Q8_0, QT.Q5_1])
def test_supported_weight_types_load(tmp_path, qtype):
    _, w = read_weights(write_tiny_llama(tmp_path / "m.gguf", qtype=qtype), 0, 3)
    assert w.wqkv.dtype == np.float32 and np.isfinite(w.wqkv).all()


def test_other_architecture_is_refused_by_name(tmp_path):
    path = write_tiny_llama(tmp_path / "gpt2.gguf", arch="gpt2")
    with pytest.raises(UnsupportedArchitecture, match="gpt2") as e:
        read_weights(path, 0, 1)
    assert isinstance(e.value, UnsupportedModel) and e.value.arch == "gpt2"


def test_undequantizable_tensor_type_is_refused(tmp_path):
    path = write_tiny_llama(tmp_path / "iq.gguf", odd_tensor_type=QT.IQ4_NL)
    with pytest.raises(UnsupportedTensorType, match="IQ4_NL"):
        read_weights(path, 0, 1)


@pytest.mark.parametrize("start,end", [(0, 0), (2, 1), (-1, 2), (0, 4)])
def test_bad_layer_range(tiny_path, start, end):
    with pytest.raises(BadLayerRange):
        read_weights(tiny_path, start, end)


@pytest.mark.slow
def test_real_model_config(model_path):
    from services.modelstore.weights import read_config
    config, _ = read_config(model_path)
    assert (config.n_layers, config.d_model, config.n_heads, config.n_kv_heads) == (30, 576, 9, 3)
    assert (config.head_dim, config.ffn_dim, config.vocab_size) == (64, 1536, 49152)
    assert config.rope_base == 100000.0 and config.tied_output


def test_the_tensor_index_reads_what_ggufs_own_reader_reads(model_path):
    """gguf_tensors.TensorFile (which read_weights uses: gguf's reader spends seconds on the
    vocabulary) gives every tensor and field of the default model as gguf.GGUFReader does."""
    from gguf import GGUFReader

    from services.modelstore.gguf_tensors import TensorFile
    ours, theirs = TensorFile(model_path), GGUFReader(str(model_path))
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert (a.tensor_type, a.shape) == (b.tensor_type, tuple(int(d) for d in b.shape)), a.name
        assert (a.data.shape, a.data.dtype) == (b.data.shape, b.data.dtype), a.name
        np.testing.assert_array_equal(a.data, b.data)
    keys = [k for k in theirs.fields if not k.startswith("GGUF.")]
    assert sorted(keys) == sorted(ours.fields)
    for k in keys:
        want = theirs.fields[k].contents()
        got = ours.fields[k].contents()
        if isinstance(want, list) and want and isinstance(want[0], str):
            assert got == want, k
        else:
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=k)
