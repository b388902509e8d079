"""ModelConfig: the shape of a llama-architecture model, read from GGUF metadata."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

SUPPORTED_ARCHITECTURES = ("llama",)


class UnsupportedModel(ValueError):
    """The GGUF file holds a model llmbus cannot run; the message names what is unsupported."""


class UnsupportedArchitecture(UnsupportedModel):
    def __init__(self, arch: str):
        super().__init__(f"model architecture {arch!r} is not supported "
                         f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
        self.arch = arch


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    rope_base: float
    rope_dims: int
    norm_eps: float
    tied_output: bool        # output head is token_embd (no output.weight tensor)
    context_length: int

    def __post_init__(self):
        if self.n_heads % self.n_kv_heads:
            raise UnsupportedModel(f"{self.n_heads} heads do not split into {self.n_kv_heads} KV groups")
        if self.rope_dims % 2 or not 0 < self.rope_dims <= self.head_dim:
            raise UnsupportedModel(f"rope dims {self.rope_dims} do not fit head dim {self.head_dim}")

    @property
    def qkv_dim(self) -> int:
        """Width of the fused q|k|v projection."""
        return (self.n_heads + 2 * self.n_kv_heads) * self.head_dim

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ModelConfig":
        return cls(**json.loads(text))


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def config_from_gguf(reader) -> ModelConfig:
    """Read ModelConfig from an open gguf.GGUFReader; UnsupportedModel if it is not a plain llama."""
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitecture(str(arch))

    def need(key: str):
        v = _field(reader, f"{arch}.{key}")
        if v is None:
            raise UnsupportedModel(f"GGUF metadata lacks {arch}.{key}")
        return v

    names = {t.name for t in reader.tensors}
    scaling = _field(reader, f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", None) or "rope_freqs.weight" in names:
        raise UnsupportedModel(f"RoPE scaling ({scaling!r} / rope_freqs) is not supported yet")
    d_model = int(need("embedding_length"))
    n_heads = int(need("attention.head_count"))
    head_dim = int(_field(reader, f"{arch}.attention.key_length", d_model // n_heads))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab = _field(reader, f"{arch}.vocab_size") or (len(tokens) if tokens else None)
    if vocab is None:
        emb = next(t for t in reader.tensors if t.name == "token_embd.weight")
        vocab = int(emb.shape[1])
    return ModelConfig(
        arch=arch,
        n_layers=int(need("block_count")),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", n_heads)),
        head_dim=head_dim,
        ffn_dim=int(need("feed_forward_length")),
        vocab_size=int(vocab),
        rope_base=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        rope_dims=int(_field(reader, f"{arch}.rope.dimension_count", head_dim)),
        norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        tied_output="output.weight" not in names,
        context_length=int(_field(reader, f"{arch}.context_length", 2048)),
    )
