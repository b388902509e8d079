"""How each supported architecture's layer differs from plain llama, as data the layer code asks.

One frozen description per GGUF `general.architecture`; the numbers that vary per model file
(window, RoPE bases and scaling, query scale) are read from metadata into ModelConfig
(gguf_config.py). Details follow llama.cpp's model code (src/models/<arch>.cpp), which is what
the GGUF files are made for.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    name: str
    # RoPE pairing: "normal" rotates dims (2i, 2i+1), "neox" dims (i, i + n_rot/2). The loader
    # permutes q/k rows of neox models into the normal pairing (weights.py), so one kernel serves both.
    rope_pairing: str = "normal"
    qkv_bias: bool = False           # q/k/v projections add a bias (qwen2)
    qk_norm: bool = False            # RMSNorm over each q and k head before RoPE (qwen3, gemma3)
    post_norms: bool = False         # RMSNorm of the attention and FFN outputs before the residual add (gemma3)
    activation: str = "silu"         # gate activation: "silu" (SwiGLU) or "gelu_tanh" (GeGLU, gemma)
    embed_scale_sqrt_d: bool = False  # embeddings scaled by sqrt(d_model) (gemma)
    # Sliding-window layers: every layer but each `swa_period`-th is local (gemma3: 5 local, 1
    # global), when metadata sets a window; 0 means the architecture has none llama.cpp applies.
    swa_period: int = 0
    # Tensor names per layer, fused along the output rows in this order: q|k|v and gate|up.
    # `fused_qkv` names one tensor already holding q|k|v (phi3), used when the file has it.
    qkv_names: tuple[str, ...] = ("attn_q", "attn_k", "attn_v")
    fused_qkv: str | None = None
    gate_up_names: tuple[str, ...] = ("ffn_gate", "ffn_up")


ARCHITECTURES = {a.name: a for a in (
    # Llama 1-3 and the Mistral-family files converted to the llama layout. llama.cpp applies no
    # sliding window to `llama` files (Mistral 7B's 4096 window is past its reference contexts).
    Architecture("llama"),
    Architecture("qwen2", rope_pairing="neox", qkv_bias=True),
    Architecture("qwen3", rope_pairing="neox", qk_norm=True),
    Architecture("gemma3", rope_pairing="neox", qk_norm=True, post_norms=True, activation="gelu_tanh",
                 embed_scale_sqrt_d=True, swa_period=6),
    # Phi-3's window is in its metadata, but llama.cpp turns phi3 SWA off; we follow llama.cpp.
    # Its ffn_up holds gate|up (2F rows), split by llama.cpp's SwiGLU in that order.
    Architecture("phi3", rope_pairing="neox", fused_qkv="attn_qkv", gate_up_names=("ffn_up",)),
)}

