"""Write small random llama GGUF files (real format, via gguf.GGUFWriter) for fast engine tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import quantize

from services.modelstore.weights import SUPPORTED_TYPES

TINY = dict(n_layers=3, d_model=64, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab=101)


def write_tiny_llama(path: Path, *, arch: str = "llama", seed: int = 0, qtype: QT = QT.Q8_0,
                     tied: bool = False, odd_tensor_type: QT | None = None) -> Path:
    """A llama-shaped model with random weights; matrices in `qtype`, norms in F32."""
    c = TINY
    rng = np.random.default_rng(seed)
    hd = c["d_model"] // c["n_heads"]
    w = GGUFWriter(str(path), arch)
    w.add_block_count(c["n_layers"])
    w.add_context_length(256)
    w.add_embedding_length(c["d_model"])
    w.add_feed_forward_length(c["ffn_dim"])
    w.add_head_count(c["n_heads"])
    w.add_head_count_kv(c["n_kv_heads"])
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(c["vocab"])

    def mat(name, out, inp, kind=qtype):
        a = (rng.standard_normal((out, inp)) / np.sqrt(inp)).astype(np.float32)
        if kind not in (QT.F32, QT.F16) and kind not in SUPPORTED_TYPES:
            block, size = GGML_QUANT_SIZES[kind]       # a type we refuse: zero bytes will do
            w.add_tensor(name, np.zeros((out, inp // block * size), np.uint8), raw_dtype=kind)
        elif kind == QT.F32:
            w.add_tensor(name, a)
        elif kind == QT.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, quantize(a, kind), raw_dtype=kind)

    def norm(name):
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(c["d_model"])).astype(np.float32))

    d, f = c["d_model"], c["ffn_dim"]
    mat("token_embd.weight", c["vocab"], d, QT.Q8_0)
    for i in range(c["n_layers"]):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight")
        mat(p + "attn_q.weight", d, d, odd_tensor_type or qtype)
        mat(p + "attn_k.weight", c["n_kv_heads"] * hd, d)
        mat(p + "attn_v.weight", c["n_kv_heads"] * hd, d)
        mat(p + "attn_output.weight", d, d)
        norm(p + "ffn_norm.weight")
        mat(p + "ffn_gate.weight", f, d)
        mat(p + "ffn_up.weight", f, d)
        mat(p + "ffn_down.weight", d, f)
    norm("output_norm.weight")
    if not tied:
        mat("output.weight", c["vocab"], d, QT.F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
