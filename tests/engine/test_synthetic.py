"""bench/synthetic.py: random-weight GGUFs of a given shape load with gguf's reader and ours, hold
the declared shapes and block kinds, and run a forward to finite logits."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader
from gguf.quants import dequantize

from bench.synthetic import PRESETS, QUANTS, BadShape, Shape, cached_path, main, synthetic_model, use_more_bits
from services.modelstore.weight_cache import load_weights
from services.shard.inprocess import Chunk, PageAllocator, build_batch
from services.shard.kv_cache import KVConfig, PagedKVCache
from services.shard.model import ShardModel

SMALL = Shape(n_layers=8, d_model=256, ffn_dim=512, n_heads=4, n_kv_heads=2)
TIED = Shape(n_layers=2, d_model=128, ffn_dim=384, n_heads=2, n_kv_heads=1, tied=True)   # rows not 256-whole
VOCAB = 49152                                  # the default model's tokenizer


@pytest.fixture(scope="module")
def cache(tmp_path_factory, model_path):
    return tmp_path_factory.mktemp("synthetic")


@pytest.fixture(scope="module")
def small(cache):
    """quant -> (path, its tensors by name as gguf's reader sees them): each file read once."""
    return {q: (p, {t.name: t for t in GGUFReader(p).tensors})
            for q in QUANTS for p in [synthetic_model(SMALL, q, cache=cache)]}


def _expected_kind(quant: str, name: str, layer: int | None, n_layers: int, cols: int) -> QT:
    """llama.cpp's choices for the file types, written out for the test on its own."""
    if quant == "q8_0":
        return QT.Q8_0
    if name == "output":
        return QT.Q6_K if cols % 256 == 0 else QT.Q8_0
    if quant == "q4_0":
        return QT.Q4_0
    more = layer is not None and (layer < n_layers // 8 or layer >= 7 * n_layers // 8
                                  or (layer - n_layers // 8) % 3 == 2)
    kind = QT.Q6_K if name in ("attn_v", "ffn_down") and more else QT.Q4_K
    return kind if cols % 256 == 0 else {QT.Q6_K: QT.Q8_0, QT.Q4_K: QT.Q5_0}[kind]


@pytest.mark.parametrize("quant", QUANTS)
def test_the_file_holds_the_declared_shapes_and_kinds(cache, small, quant):
    path, t = small[quant]
    assert path == cached_path(SMALL, quant, cache=cache) and path.parent == cache / "synthetic"
    s, hd = SMALL, SMALL.d_model // SMALL.n_heads
    out = {"attn_q": s.d_model, "attn_k": s.n_kv_heads * hd, "attn_v": s.n_kv_heads * hd,
           "attn_output": s.d_model, "ffn_gate": s.ffn_dim, "ffn_up": s.ffn_dim, "ffn_down": s.d_model}
    assert len(t) == 2 + s.n_layers * 9 + 1
    for i in range(s.n_layers):
        for name, rows in out.items():
            cols = s.ffn_dim if name == "ffn_down" else s.d_model
            x = t[f"blk.{i}.{name}.weight"]
            assert [int(n) for n in x.shape] == [cols, rows], name          # ggml order: in, out
            assert x.tensor_type == _expected_kind(quant, name, i, s.n_layers, cols), (name, i)
        for norm in ("attn_norm", "ffn_norm"):
            assert t[f"blk.{i}.{norm}.weight"].tensor_type == QT.F32
    assert [int(n) for n in t["token_embd.weight"].shape] == [s.d_model, VOCAB]
    assert t["token_embd.weight"].tensor_type == (QT.Q4_K if quant == "q4_k_m" else _expected_kind(
        quant, "token_embd", None, s.n_layers, s.d_model))
    assert t["output.weight"].tensor_type == _expected_kind(quant, "output", None, s.n_layers, s.d_model)
    if quant == "q4_k_m":       # both kinds of layer are in the file: the mix is a mix
        assert {t[f"blk.{i}.ffn_down.weight"].tensor_type for i in range(s.n_layers)} == {QT.Q4_K, QT.Q6_K}


@pytest.mark.parametrize("quant", QUANTS)
def test_weights_spread_about_one_over_root_columns(small, quant):
    """Sane block scales: finite, and weights of the spread a trained layer has."""
    t = small[quant][1]
    for name in ("blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.3.attn_v.weight", "output.weight"):
        x = t[name]
        w = dequantize(x.data, x.tensor_type)
        assert np.isfinite(w).all()
        rms = float(np.sqrt(np.mean(np.square(w, dtype=np.float64))))
        assert 0.5 <= rms * np.sqrt(int(x.shape[0])) <= 2.0, (name, rms)


@pytest.mark.parametrize("shape, quant", [(SMALL, "q4_0"), (SMALL, "q4_k_m"), (SMALL, "q8_0"), (TIED, "q4_k_m")])
def test_a_forward_through_our_reader_gives_finite_logits(cache, tmp_path, shape, quant):
    path = synthetic_model(shape, quant, cache=cache)
    loaded = load_weights(path, 0, shape.n_layers, "quantized", root=tmp_path)
    cfg = loaded.config
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size) == (
        shape.n_layers, shape.d_model, shape.n_heads, shape.n_kv_heads, VOCAB)
    assert loaded.weights.quantized and (loaded.weights.output is loaded.weights.token_embd) == shape.tied
    kv = PagedKVCache.for_model(cfg, 0, cfg.n_layers, KVConfig(8, 16))
    model = ShardModel(cfg, loaded.weights, kv)
    pages = PageAllocator(8, 16)
    first = model.forward(build_batch([Chunk("a", [1, 500, 9000, 40000, 7], 0)], pages))
    then = model.forward(build_batch([Chunk("a", [123], 5)], pages))
    for logits in (first, then):
        assert logits.dtype == np.float32 and logits.shape == (1, VOCAB)
        assert np.isfinite(logits).all() and 0.1 < float(logits.std()) < 100.0


def test_the_same_arguments_give_the_same_bytes_and_a_seed_other_ones(cache, tmp_path):
    a = synthetic_model(TIED, "q4_0", cache=cache)
    again = synthetic_model(TIED, "q4_0", cache=tmp_path)
    other = synthetic_model(TIED, "q4_0", seed=1, cache=cache)
    assert a.read_bytes() == again.read_bytes() != other.read_bytes()
    assert synthetic_model(TIED, "q4_0", cache=cache) == a            # made once, then found


def test_presets_are_the_llama_shapes():
    assert PRESETS["8b"] == Shape(32, 4096, 14336, 32, 8)
    assert PRESETS["70b"] == Shape(80, 8192, 28672, 64, 8)
    assert PRESETS["1b"].tied and PRESETS["3b"].tied
    # llama.cpp's use_more_bits on 32 layers: 0-3, 28-31 and every third from 6.
    assert [i for i in range(32) if use_more_bits(i, 32)] == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]


@pytest.mark.parametrize("shape, quant, why", [
    (Shape(2, 256, 512, 3, 1), "q4_0", "do not divide"),
    (Shape(2, 256, 512, 4, 3), "q4_0", "do not divide"),
    (Shape(2, 240, 512, 4, 2), "q4_0", "multiples of 32"),
    (Shape(2, 192, 512, 64, 64), "q4_0", "odd"),
    (Shape(0, 256, 512, 4, 2), "q4_0", "positive"),
    (SMALL, "q3_k", "expected one of"),
])
def test_bad_shapes_and_kinds_are_refused_by_name_and_write_nothing(tmp_path, shape, quant, why):
    with pytest.raises(BadShape, match=why):
        synthetic_model(shape, quant, cache=tmp_path)
    assert not (tmp_path / "synthetic").exists()


def test_the_command_refuses_a_preset_with_sizes(capsys):
    with pytest.raises(SystemExit):
        main(["8b", "--layers", "2"])
    assert "not both" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--layers", "2"])
    assert "all needed" in capsys.readouterr().err
