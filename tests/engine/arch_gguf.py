"""Tiny GGUFs of each supported architecture: random weights, that architecture's real metadata keys
and tensor names, and the default model's gpt2-BPE vocabulary cut to its first VOCAB tokens (with
the merges among them: still a working BPE) so llama.cpp loads them as they are, and quickly.

Deterministic: the same (name, vocabulary) gives the same bytes, so a test can rebuild a file and
check it against the sha256 stored with llama.cpp's reference logits (tests/data/arch_refs.json).
With a K-quant mix (tests/modelstore/kquant_gguf.MIXES) the same models are written at K widths
(KSPECS) in that mix's block kinds, for tests/modelstore/test_arch_kquant_parity.py.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter
from gguf.quants import quantize

from services.modelstore.gguf_meta import read_metadata
from tests.modelstore.kquant_gguf import blocks, kind_for

VOCAB = 2048     # 49152 tokens cost ~2.5 s in every GGUFReader and a 49152-row head


@dataclass(frozen=True)
class TinySpec:
    arch: str
    seed: int
    n_layers: int = 3
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    ffn_dim: int = 128
    qtype: QT = QT.Q8_0
    rope_base: float = 10000.0
    meta: dict = field(default_factory=dict)     # extra "<arch>.<key>": value
    tied: bool = False


def _llama3_freqs(n_rot: int, base: float) -> np.ndarray:
    """Llama 3's rope_freqs (factor 8, low/high freq factors 1/4, original context 64 here)."""
    factor, low, high, old_ctx = 8.0, 1.0, 4.0, 64
    freqs = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    wavelen = 2 * np.pi / freqs
    smooth = (old_ctx / wavelen - low) / (high - low)
    out = np.where(wavelen < old_ctx / high, 1.0,
                   np.where(wavelen > old_ctx / low, factor, 1.0 / ((1 - smooth) / factor + smooth)))
    return out.astype(np.float32)


SPECS = {
    "llama3": TinySpec("llama", 31, rope_base=500000.0),
    "llama-linear": TinySpec("llama", 32, meta={"rope.scaling.type": "linear", "rope.scaling.factor": 4.0}),
    "llama-yarn": TinySpec("llama", 33, meta={"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                                              "rope.scaling.original_context_length": 64}),
    # Mistral 7B as converted: the llama layout with its window in metadata, which llama.cpp does
    # not apply to `llama` files (a window of 5 here, so that applying it would show).
    "mistral": TinySpec("llama", 34, n_heads=8, n_kv_heads=2, head_dim=8,
                        meta={"attention.sliding_window": 5}),
    "qwen2": TinySpec("qwen2", 41, rope_base=1000000.0),
    "qwen3": TinySpec("qwen3", 51, head_dim=32, rope_base=1000000.0),
    "gemma3": TinySpec("gemma3", 61, n_layers=6, head_dim=32, rope_base=1000000.0, tied=True,
                       meta={"attention.sliding_window": 5, "rope.freq_base_swa": 10000.0}),
    "phi3": TinySpec("phi3", 71, n_heads=4, n_kv_heads=4),
}

# The same models at widths K blocks allow (rows of 256 and 512 weights), for the K-quant mixes of
# tests/modelstore/kquant_gguf.py. Four layers (gemma3 keeps six: its sixth is its one global
# layer). qwen3 and gemma3 keep heads narrower than d_model / n_heads, so their attn_output rows
# are 128 weights: llama.cpp's fallback kinds (Q5_0, Q5_1, Q8_0) hold those.
_K = {"d_model": 256, "ffn_dim": 512, "n_layers": 4}
_K_HEADS = {"mistral": {"head_dim": 32}, "qwen3": {}, "gemma3": {"n_layers": 6}}   # others: 4 heads of 64
KSPECS = {name: replace(s, **(_K | _K_HEADS.get(name, {"head_dim": 64}))) for name, s in SPECS.items()}


@lru_cache(maxsize=4)
def _vocabulary(vocab_from: Path) -> tuple[dict, list, list]:
    """The metadata of `vocab_from`, its first VOCAB tokens and the merges among them (read once:
    a 49k-token vocabulary takes seconds)."""
    vocab = read_metadata(vocab_from)
    tokens = vocab["tokenizer.ggml.tokens"][:VOCAB]
    kept = set(tokens)
    merges = [m for m in vocab["tokenizer.ggml.merges"]
              if m.replace(" ", "") in kept and all(p in kept for p in m.split(" "))]
    return vocab, tokens, merges


def write(path: Path, name: str, vocab_from: Path, mix: str | None = None) -> Path:
    """Write the tiny model SPECS[name] to `path`, with the tokenizer metadata of `vocab_from`; with a
    `mix` of kquant_gguf.MIXES (or "f32"), KSPECS[name] with each matrix in that mix's block kind."""
    s = SPECS[name] if mix is None else KSPECS[name]
    rng = np.random.default_rng(s.seed)
    vocab, tokens, merges = _vocabulary(Path(vocab_from))
    n_vocab = len(tokens)
    a, d, hd, f = s.arch, s.d_model, s.head_dim, s.ffn_dim
    w = GGUFWriter(str(path), a)
    # Not the architecture's name: llama.cpp keys vocabulary quirks on it (phi3 looks for <|end|>).
    w.add_string("general.name", f"tiny-random-{s.seed}")
    for key, val in (("block_count", s.n_layers), ("context_length", 256), ("embedding_length", d),
                     ("feed_forward_length", f), ("attention.head_count", s.n_heads),
                     ("attention.head_count_kv", s.n_kv_heads), ("rope.dimension_count", hd)):
        w.add_uint32(f"{a}.{key}", val)
    if hd != d // s.n_heads:
        w.add_uint32(f"{a}.attention.key_length", hd)
        w.add_uint32(f"{a}.attention.value_length", hd)
    w.add_float32(f"{a}.rope.freq_base", s.rope_base)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    for key, val in s.meta.items():
        {str: w.add_string, float: w.add_float32, int: w.add_uint32}[type(val)](f"{a}.{key}", val)
    for key in ("model", "pre"):
        w.add_string(f"tokenizer.ggml.{key}", vocab[f"tokenizer.ggml.{key}"])
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [int(t) for t in vocab["tokenizer.ggml.token_type"][:VOCAB]])
    w.add_array("tokenizer.ggml.merges", merges)
    for key in ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"):
        w.add_uint32(f"tokenizer.ggml.{key}", int(vocab[f"tokenizer.ggml.{key}"]))
    w.add_bool("tokenizer.ggml.add_bos_token", False)

    def mat(tname, out, inp, kind=s.qtype, scale=1.0, role=None):
        m = (scale * rng.standard_normal((out, inp)) / np.sqrt(inp)).astype(np.float32)
        if mix is not None:
            parts = tname.split(".")
            layer = int(parts[1]) if parts[0] == "blk" else None
            kind = kind_for(mix, role or parts[-2], layer, s.n_layers, inp)
            w.add_tensor(tname, m) if kind == QT.F32 else w.add_tensor(tname, blocks(m, kind), raw_dtype=kind)
        elif kind == QT.F32:
            w.add_tensor(tname, m)
        elif kind == QT.F16:
            w.add_tensor(tname, m.astype(np.float16))
        else:
            w.add_tensor(tname, quantize(m, kind), raw_dtype=kind)

    def vec(tname, n, around=1.0, spread=0.1):
        w.add_tensor(tname, (around + spread * rng.standard_normal(n)).astype(np.float32))

    # Gemma's embeddings are scaled up by sqrt(d) in the forward, and are its head too: larger ones
    # spread its logits as the head's scale spreads the others' (so that some top-2 margins pass 1.0).
    # A tied embedding is the head too: K mixes give it the head's kind, as llama.cpp does.
    mat("token_embd.weight", n_vocab, d, QT.Q8_0, scale=(4.0 if a == "gemma3" else 1.0) * np.sqrt(d) / 4,
        role="output" if s.tied else None)
    if a == "llama" and s.seed == 31:
        w.add_tensor("rope_freqs.weight", _llama3_freqs(hd, s.rope_base))
    qd, kvd = s.n_heads * hd, s.n_kv_heads * hd
    for i in range(s.n_layers):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", d)
        if a == "phi3":
            mat(p + "attn_qkv.weight", qd + 2 * kvd, d)
        else:
            mat(p + "attn_q.weight", qd, d)
            mat(p + "attn_k.weight", kvd, d)
            mat(p + "attn_v.weight", kvd, d)
        if a == "qwen2":
            for nm, n in (("attn_q", qd), ("attn_k", kvd), ("attn_v", kvd)):
                vec(p + nm + ".bias", n, 0.0, 0.5)
        if a in ("qwen3", "gemma3"):
            vec(p + "attn_q_norm.weight", hd)
            vec(p + "attn_k_norm.weight", hd)
        mat(p + "attn_output.weight", d, qd)
        if a == "gemma3":
            vec(p + "post_attention_norm.weight", d)
            vec(p + "post_ffw_norm.weight", d)
        vec(p + "ffn_norm.weight", d)
        if a == "phi3":
            mat(p + "ffn_up.weight", 2 * f, d)
        else:
            mat(p + "ffn_gate.weight", f, d)
            mat(p + "ffn_up.weight", f, d)
        mat(p + "ffn_down.weight", d, f)
    vec("output_norm.weight", d)
    if not s.tied:
        mat("output.weight", n_vocab, d, QT.Q8_0, scale=4.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
