"""A tiny llama GGUF in K-quant mixes, written deterministically from a seed (no llama.cpp needed).

Four layers, widths that are multiples of 256 (so the K kinds apply) and the default model's real
vocabulary and tokenizer metadata, so llama.cpp loads it as it is. The mixes follow llama.cpp's
choice of block kind per tensor for its file types (Q4_K_M and Q5_K_M: Q6_K for the head and for
attn_v / ffn_down of the first and last layers); the Q4_K_M mix also puts a Q5_0, a Q5_1 and a Q8_0
tensor in, as real Q4_K_M files do where a width is not a multiple of 256. The K blocks come from a
plain numpy quantizer written here (min/max per sub-block, 6-bit scales); any valid block serves,
since both engines read the same file. With mix "f32" every matrix stays float32 (for llama.cpp's
own quantizer). tests/modelstore/make_kquant_reference.py makes the references from these files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter
from gguf.quants import quantize

from bench.synthetic import add_tokenizer as _add_tokenizer
from bench.synthetic import tokenizer_fields  # noqa: F401  (the tokenizer to give write_kquant_llama)

SHAPE = dict(n_layers=4, d_model=256, n_heads=4, n_kv_heads=2, ffn_dim=512)
MIXES = ("q4_k_m", "q5_k_m", "q6_k", "q8_0")
SEED = 14


def _f16_bytes(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).view(np.uint8).reshape(a.shape[0], 2)


def _quant_k45(w: np.ndarray, bits: int) -> np.ndarray:
    """(rows, cols) float32 -> Q4_K (bits 4) or Q5_K (bits 5) blocks, (rows, cols / 256 * bytes) uint8."""
    nmax = (1 << bits) - 1
    rows = w.shape[0]
    x = w.reshape(-1, 8, 32).astype(np.float32)                        # (nb, sub-blocks, 32)
    nb = x.shape[0]
    lo = np.minimum(x.min(-1), 0)
    s, m = (x.max(-1) - lo) / nmax, -lo                                 # sub-block scale and min, >= 0
    d = (s.max(-1) / 63).astype(np.float16).astype(np.float32)
    dmin = (m.max(-1) / 63).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.nan_to_num(np.rint(s / d[:, None])), 0, 63).astype(np.uint8)
        mq = np.clip(np.nan_to_num(np.rint(m / dmin[:, None])), 0, 63).astype(np.uint8)
        scale, mins = d[:, None] * sc, dmin[:, None] * mq
        q = np.clip(np.nan_to_num(np.rint((x + mins[..., None]) / scale[..., None])), 0, nmax).astype(np.uint8)
    packed = np.concatenate([sc[:, :4] | ((sc[:, 4:] >> 4) << 6), mq[:, :4] | ((mq[:, 4:] >> 4) << 6),
                             (sc[:, 4:] & 15) | ((mq[:, 4:] & 15) << 4)], axis=1)          # (nb, 12)
    q = q.reshape(nb, 4, 2, 32)                                         # (nb, pair j, low/high, l)
    qs = ((q[:, :, 0] & 15) | ((q[:, :, 1] & 15) << 4)).reshape(nb, 128)
    parts = [_f16_bytes(d), _f16_bytes(dmin), packed]
    if bits == 5:
        hi = (q >> 4).reshape(nb, 8, 32).astype(np.uint8)               # sub-block 2j + h: bit 2j + h of qh[l]
        parts.append((hi << np.arange(8, dtype=np.uint8)[None, :, None]).sum(1, dtype=np.uint8))
    parts.append(qs)
    return np.concatenate(parts, axis=1).reshape(rows, -1)


def _quant_q6k(w: np.ndarray) -> np.ndarray:
    """(rows, cols) float32 -> Q6_K blocks (rows, cols / 256 * 210) uint8."""
    rows = w.shape[0]
    x = w.reshape(-1, 16, 16).astype(np.float32)
    nb = x.shape[0]
    s = np.abs(x).max(-1) / 31
    d = (s.max(-1) / 127).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.nan_to_num(np.rint(s / d[:, None])), 0, 127).astype(np.int8)
        q = np.clip(np.nan_to_num(np.rint(x / (d[:, None] * sc)[..., None])), -32, 31).astype(np.int16) + 32
    q = q.astype(np.uint8).reshape(nb, 2, 4, 32)                        # (nb, half, quarter i, l)
    ql = np.concatenate([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4),
                         (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)], axis=2).reshape(nb, 128)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6))
    return np.concatenate([ql, qh.reshape(nb, 64), sc.view(np.uint8), _f16_bytes(d)], axis=1).reshape(rows, -1)


def blocks(w: np.ndarray, kind: QT) -> np.ndarray:
    """w (rows, cols) float32 in GGUF's blocks of `kind`."""
    if kind == QT.Q4_K:
        return _quant_k45(w, 4)
    if kind == QT.Q5_K:
        return _quant_k45(w, 5)
    if kind == QT.Q6_K:
        return _quant_q6k(w)
    return quantize(w, kind)


# llama.cpp's kind where a row is not whole 256-weight super-blocks (llama_tensor_get_type's fallback).
FALLBACK = {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}


def kind_for(mix: str, name: str, layer: int | None, n_layers: int = SHAPE["n_layers"], cols: int = 256) -> QT:
    """The block kind of tensor `name` (of `layer` of `n_layers`, rows of `cols` weights) in `mix`."""
    kind = _kind(mix, name, layer, n_layers)
    return FALLBACK.get(kind, kind) if cols % 256 else kind


def _kind(mix: str, name: str, layer: int | None, n_layers: int) -> QT:
    if mix in ("f32", "q8_0", "q6_k"):
        return {"f32": QT.F32, "q8_0": QT.Q8_0, "q6_k": QT.Q6_K}[mix]
    base = QT.Q4_K if mix == "q4_k_m" else QT.Q5_K
    if name == "output":
        return QT.Q6_K
    if name in ("attn_v", "ffn_down") and layer in (0, n_layers - 1):
        return QT.Q6_K
    if mix == "q4_k_m":
        odd = {("attn_k", 1): QT.Q5_0, ("ffn_up", 2): QT.Q5_1, ("attn_output", 2): QT.Q8_0}
        return odd.get((name, layer), base)
    return base


def write_kquant_llama(path: Path, mix: str, tokenizer: dict, seed: int = SEED) -> Path:
    """The tiny model in `mix` (MIXES or "f32") at `path`, with the tokenizer_fields given; the same
    bytes for the same arguments."""
    c = SHAPE
    rng = np.random.default_rng(seed)
    d, f, hd = c["d_model"], c["ffn_dim"], c["d_model"] // c["n_heads"]
    w = GGUFWriter(str(path), "llama")
    w.add_name(f"kquant-tiny-{mix}")
    w.add_block_count(c["n_layers"])
    w.add_context_length(512)
    w.add_embedding_length(d)
    w.add_feed_forward_length(f)
    w.add_head_count(c["n_heads"])
    w.add_head_count_kv(c["n_kv_heads"])
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    _add_tokenizer(w, tokenizer)
    vocab = len(tokenizer["tokenizer.ggml.tokens"])
    w.add_vocab_size(vocab)

    def mat(name: str, tensor: str, out: int, inp: int, layer: int | None = None, std: float | None = None):
        a = (rng.standard_normal((out, inp)) * (std or 1 / np.sqrt(inp))).astype(np.float32)
        kind = kind_for(mix, tensor, layer)
        if kind == QT.F32:
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, blocks(a, kind), raw_dtype=kind)

    def norm(name: str):
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(d)).astype(np.float32))

    mat("token_embd.weight", "token_embd", vocab, d, std=1.0)
    for i in range(c["n_layers"]):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight")
        mat(p + "attn_q.weight", "attn_q", d, d, i)
        mat(p + "attn_k.weight", "attn_k", c["n_kv_heads"] * hd, d, i)
        mat(p + "attn_v.weight", "attn_v", c["n_kv_heads"] * hd, d, i)
        mat(p + "attn_output.weight", "attn_output", d, d, i)
        norm(p + "ffn_norm.weight")
        mat(p + "ffn_gate.weight", "ffn_gate", f, d, i)
        mat(p + "ffn_up.weight", "ffn_up", f, d, i)
        mat(p + "ffn_down.weight", "ffn_down", d, f, i)
    norm("output_norm.weight")
    mat("output.weight", "output", vocab, d, std=3 / np.sqrt(d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
