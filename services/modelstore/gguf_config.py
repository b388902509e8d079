"""ModelConfig: the shape of a model and how its layers differ from llama, read from GGUF metadata.

Every metadata key the engine uses is read here, once; services/modelstore/arch.py holds what is
fixed per architecture.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np

from kernels.rope import RopeScaling
from services.modelstore.arch import ARCHITECTURES, Architecture

SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)


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
    attn_scale: float = 0.0              # softmax scale of q.k; 0: 1/sqrt(head_dim)
    rope_freq_scale: float = 1.0         # linear / YaRN: 1/factor
    rope_attn_factor: float = 1.0
    rope_freqs: tuple[float, ...] | None = None   # Llama 3: per-pair angle divisors (rope_freqs tensor)
    yarn_orig_ctx: int = 0               # > 0: YaRN scaling, from this training context
    sliding_window: int = 0              # keys a local layer sees (itself included); 0: none
    local_layers: tuple[bool, ...] = ()  # per layer, True where it attends over the window only
    rope_base_swa: float = 10000.0       # RoPE base of local (sliding-window) layers
    final_softcap: float = 0.0           # logits = c * tanh(logits / c) when > 0

    def __post_init__(self):
        if self.n_heads % self.n_kv_heads:
            raise UnsupportedModel(f"{self.n_heads} heads do not split into {self.n_kv_heads} KV groups")
        if self.rope_dims % 2 or not 0 < self.rope_dims <= self.head_dim:
            raise UnsupportedModel(f"rope dims {self.rope_dims} do not fit head dim {self.head_dim}")
        if self.rope_freqs is not None:
            object.__setattr__(self, "rope_freqs", tuple(float(f) for f in self.rope_freqs))
            if len(self.rope_freqs) != self.rope_dims // 2:
                raise UnsupportedModel(f"rope_freqs has {len(self.rope_freqs)} factors for "
                                       f"{self.rope_dims // 2} rotated pairs")
        object.__setattr__(self, "local_layers", tuple(bool(b) for b in self.local_layers))
        if self.local_layers and len(self.local_layers) != self.n_layers:
            raise UnsupportedModel(f"sliding-window pattern of {len(self.local_layers)} layers for {self.n_layers}")
        if not self.attn_scale:
            object.__setattr__(self, "attn_scale", 1.0 / math.sqrt(self.head_dim))

    @property
    def spec(self) -> Architecture:
        """How this architecture's layer differs from llama (services/modelstore/arch.py)."""
        return ARCHITECTURES[self.arch]

    @property
    def qkv_dim(self) -> int:
        """Width of the fused q|k|v projection."""
        return (self.n_heads + 2 * self.n_kv_heads) * self.head_dim

    def is_local(self, layer: int) -> bool:
        """True for a sliding-window layer."""
        return bool(self.sliding_window and self.local_layers and self.local_layers[layer])

    def rope(self, layer: int) -> tuple[float, RopeScaling]:
        """RoPE base and scaling of `layer`: local layers use their own base, unscaled."""
        if self.is_local(layer):
            return self.rope_base_swa, RopeScaling()
        return self.rope_base, RopeScaling(freq_scale=self.rope_freq_scale, attn_factor=self.rope_attn_factor,
                                           freq_factors=self.rope_freqs, yarn_orig_ctx=self.yarn_orig_ctx)

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


def _rope_scaling(reader, arch: str, tensors: dict, context: int) -> dict:
    """ModelConfig's RoPE scaling fields, as llama.cpp reads them (llama-model.cpp, load_hparams)."""
    kind = _field(reader, f"{arch}.rope.scaling.type", "linear")
    factor = float(_field(reader, f"{arch}.rope.scaling.factor", 0.0)
                   or _field(reader, f"{arch}.rope.scale_linear", 0.0) or 0.0)
    out = {"rope_freq_scale": 1.0 if kind == "none" or factor == 0.0 else 1.0 / factor,
           "rope_attn_factor": float(_field(reader, f"{arch}.rope.scaling.attn_factor", 1.0))}
    if kind not in ("none", "linear", "yarn"):
        raise UnsupportedModel(f"RoPE scaling {kind!r} is not supported (none, linear, yarn, Llama 3 rope_freqs)")
    if kind == "yarn":
        if float(_field(reader, f"{arch}.rope.scaling.yarn_log_multiplier", 0.0) or 0.0):
            raise UnsupportedModel("YaRN with a log multiplier (DeepSeek's) is not supported")
        out["yarn_orig_ctx"] = int(_field(reader, f"{arch}.rope.scaling.original_context_length", context))
    freqs = tensors.get("rope_freqs.weight")
    if freqs is not None:
        out["rope_freqs"] = np.asarray(freqs.data, dtype=np.float32).ravel().tolist()
    return out


def _local_layers(pattern, period: int, n_layers: int) -> tuple[bool, ...]:
    """Which layers slide, as llama.cpp's load_swa_pattern: a per-layer array from metadata, or a
    period n (layers i with i % n < n - 1 are local, every n-th is global)."""
    if pattern is not None and not np.isscalar(pattern):
        return tuple(bool(b) for b in pattern)
    n = int(pattern) if pattern is not None else period
    return tuple(n == 0 or i % n < n - 1 for i in range(n_layers))


def config_from_gguf(reader) -> ModelConfig:
    """Read ModelConfig from a GGUF's `fields` and `tensors` (gguf_tensors.TensorFile, or gguf's
    GGUFReader); UnsupportedModel for what llmbus cannot run
    (an unknown architecture is refused by name before any tensor is looked at)."""
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitecture(str(arch))

    def need(key: str):
        v = _field(reader, f"{arch}.{key}")
        if v is None:
            raise UnsupportedModel(f"GGUF metadata lacks {arch}.{key}")
        return v

    tensors = {t.name: t for t in reader.tensors}
    d_model = int(need("embedding_length"))
    n_heads = int(need("attention.head_count"))
    n_layers = int(need("block_count"))
    head_dim = int(_field(reader, f"{arch}.attention.key_length", d_model // n_heads))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab = _field(reader, f"{arch}.vocab_size") or (len(tokens) if tokens else None)
    if vocab is None:
        vocab = int(tensors["token_embd.weight"].shape[1])
    context = int(_field(reader, f"{arch}.context_length", 2048))
    extra = _rope_scaling(reader, arch, tensors, context)
    if arch == "gemma3":
        # llama.cpp (models/gemma3.cpp): the 27B (62 layers) scales queries by d_model / n_heads
        # (Gemma's query_pre_attn_scalar), the others by the key length.
        extra["attn_scale"] = 1.0 / math.sqrt(d_model / n_heads if n_layers == 62 else head_dim)
        extra["final_softcap"] = float(_field(reader, f"{arch}.final_logit_softcapping", 0.0) or 0.0)
        extra["sliding_window"] = int(_field(reader, f"{arch}.attention.sliding_window", 0) or 0)
        extra["rope_base_swa"] = float(_field(reader, f"{arch}.rope.freq_base_swa", 10000.0))
        extra["local_layers"] = _local_layers(_field(reader, f"{arch}.attention.sliding_window_pattern"),
                                              ARCHITECTURES[arch].swa_period, n_layers)
    if arch == "phi3" and "rope_factors_long.weight" in tensors:
        raise UnsupportedModel("Phi-3 LongRoPE (rope_factors_long/short) is not supported yet")
    return ModelConfig(
        arch=arch,
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", n_heads)),
        head_dim=head_dim,
        ffn_dim=int(need("feed_forward_length")),
        vocab_size=int(vocab),
        rope_base=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        rope_dims=int(_field(reader, f"{arch}.rope.dimension_count", head_dim)),
        norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        tied_output="output.weight" not in tensors,
        context_length=context,
        **extra,
    )
