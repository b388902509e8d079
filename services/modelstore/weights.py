"""Read the weights of a layer range [start, end) from a GGUF file of a supported architecture.

Matrices are stored the way the forward consumes them: (out, in), contiguous, as GGUF lays
them out (kernels.matmul says why that is the fast layout); q|k|v and gate|up are fused into
one matrix each, and each kind is stacked over the range's layers (one array per kind). They
are dequantized to a float dtype, or with `quantized` kept in GGUF's blocks wherever the native
kernel multiplies that kind (services/modelstore/quantized.py). What an architecture adds (q/k/v
biases, per-head q/k norms, post-norms) is read where its description (arch.py) says it has them,
and neox-pairing q/k rows are put into the normal pairing (rope_layout.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize

from kernels.qmatrix import QMatrix, QRows
from services.modelstore.gguf_config import ModelConfig, UnsupportedModel, config_from_gguf
from services.modelstore.gguf_tensors import TensorFile
from services.modelstore.quantized import QLayers, QStack, kind_of, quantized_matrix, quantized_stack
from services.modelstore.rope_layout import head_order, qkv_order

SUPPORTED_TYPES = frozenset({QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0,
                             QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K})


class UnsupportedTensorType(UnsupportedModel):
    def __init__(self, name: str, qtype: str):
        super().__init__(f"tensor {name} has weight type {qtype}, which llmbus cannot dequantize")
        self.tensor = name
        self.qtype = qtype


class BadLayerRange(ValueError):
    """A layer range that is empty or outside the model."""


@dataclass
class ShardWeights:
    """Weights of layers [start, end); embeddings only when start == 0, head only when end == n_layers."""

    start: int
    end: int
    attn_norm: np.ndarray                   # (L, D)
    wqkv: np.ndarray | QStack | QLayers     # (L, (H + 2*KVH) * Dh, D)
    wo: np.ndarray | QStack | QLayers       # (L, D, H*Dh)
    ffn_norm: np.ndarray                    # (L, D)
    w_gate_up: np.ndarray | QStack | QLayers   # (L, 2F, D)
    w_down: np.ndarray | QStack | QLayers      # (L, D, F)
    token_embd: np.ndarray | QMatrix | None = None   # (V, D), first shard
    output_norm: np.ndarray | None = None            # (D,), last shard
    output: np.ndarray | QMatrix | None = None       # (V, D), last shard; the same object as
                                                     # token_embd when the head is tied
    # Only where the architecture has them (services/modelstore/arch.py):
    qkv_bias: np.ndarray | None = None               # (L, (H + 2*KVH) * Dh)
    q_norm: np.ndarray | None = None                 # (L, Dh)
    k_norm: np.ndarray | None = None                 # (L, Dh)
    attn_post_norm: np.ndarray | None = None         # (L, D)
    ffn_post_norm: np.ndarray | None = None          # (L, D)

    LAYER_EXTRAS = ("qkv_bias", "q_norm", "k_norm", "attn_post_norm", "ffn_post_norm")
    ARRAYS = ("attn_norm", "wqkv", "wo", "ffn_norm", "w_gate_up", "w_down",
              "token_embd", "output_norm", "output") + LAYER_EXTRAS

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in self.ARRAYS if getattr(self, k) is not None}

    def nbytes(self) -> int:
        """Bytes held, a tied head counted once."""
        return sum(a.nbytes for a in {id(a): a for a in self.arrays().values()}.values())

    def buffers(self) -> list[np.ndarray]:
        """The numpy arrays the weights are held in, each once (a tied head once): a quantized
        matrix's blocks as stored, each part of a mixed one."""
        out, seen = [], set()

        def add(a):
            if isinstance(a, QRows):
                for p in a.parts:
                    add(p)
            elif isinstance(a, QLayers):
                for m in a.layers:
                    add(m)
            elif isinstance(a, (QStack, QMatrix)):
                add(a.data)
            elif id(a) not in seen:
                seen.add(id(a))
                out.append(a)

        for a in self.arrays().values():
            add(a)
        return out

    @property
    def quantized(self) -> bool:
        return any(isinstance(a, (QStack, QLayers, QMatrix)) for a in self.arrays().values())

    def to(self, xp, dtype) -> "ShardWeights":
        """Copy onto the array module `xp` in `dtype` (e.g. cupy, float16); float weights only."""
        if self.quantized:
            raise TypeError("quantized weights are for the native CPU kernel: load them as a float dtype")
        moved = {k: xp.asarray(a).astype(dtype) for k, a in self.arrays().items()}
        return ShardWeights(start=self.start, end=self.end, **moved)


def check_range(config: ModelConfig, start: int, end: int) -> None:
    if not 0 <= start < end <= config.n_layers:
        raise BadLayerRange(f"layer range [{start}, {end}) is not inside 0..{config.n_layers}")


def _tensor(tensors: dict, name: str):
    t = tensors.get(name)
    if t is None:
        raise UnsupportedModel(f"GGUF lacks tensor {name}")
    if t.tensor_type not in SUPPORTED_TYPES:
        raise UnsupportedTensorType(name, t.tensor_type.name)
    return t


def _matrix(tensors: dict, name: str, dtype, quantized: bool = False) -> np.ndarray | QMatrix:
    t = _tensor(tensors, name)
    if quantized and len(t.shape) == 2 and kind_of(t) is not None:
        return quantized_matrix(t)
    # gguf lists shapes in ggml order; the dequantized array is numpy (out, in) row-major.
    w = dequantize(t.data, t.tensor_type)
    return w.reshape([int(n) for n in reversed(t.shape)]).astype(dtype, copy=False)


def read_config(path: Path) -> tuple[ModelConfig, TensorFile]:
    reader = TensorFile(path)
    return config_from_gguf(reader), reader


def read_weights(path: Path, start: int, end: int, dtype=np.float32, quantized: bool = False,
                 stack_into=None) -> tuple[ModelConfig, ShardWeights]:
    """The tensors of layers [start, end) (and embeddings / head at the ends) only: dequantized
    to `dtype`, or with `quantized` kept in blocks where the native kernel has their kind.
    `stack_into(field, shape)`, where given, gives the uint8 array a field's stacked blocks are
    copied into (the range cache's file for it)."""
    config, reader = read_config(path)
    check_range(config, start, end)
    tensors = {t.name: t for t in reader.tensors}

    def layers(*names: str, kind: str = "weight", field: str = "") -> np.ndarray | QStack | QLayers:
        """Stack over the range one matrix per layer, (out, in) as GGUF stores it, fused along out."""
        if quantized and kind == "weight":
            parts = [[_tensor(tensors, f"blk.{i}.{name}.weight") for name in names] for i in range(start, end)]
            stack = quantized_stack(parts, (lambda shape: stack_into(field, shape)) if stack_into and field else None)
            if stack is not None:
                return stack
        return np.ascontiguousarray(np.stack([
            np.concatenate([_matrix(tensors, f"blk.{i}.{name}.{kind}", dtype) for name in names])
            for i in range(start, end)]))

    c, spec = config, config.spec
    qkv_names = (spec.fused_qkv,) if f"blk.{start}.{spec.fused_qkv}.weight" in tensors else spec.qkv_names
    w = ShardWeights(
        start=start, end=end,
        attn_norm=layers("attn_norm"),
        wqkv=layers(*qkv_names, field="wqkv"),
        wo=layers("attn_output", field="wo"),
        ffn_norm=layers("ffn_norm"),
        w_gate_up=layers(*spec.gate_up_names, field="w_gate_up"),
        w_down=layers("ffn_down", field="w_down"),
    )
    if spec.qkv_bias:
        w.qkv_bias = layers(*qkv_names, kind="bias")
    if spec.qk_norm:
        w.q_norm, w.k_norm = layers("attn_q_norm"), layers("attn_k_norm")
    if spec.post_norms:
        w.attn_post_norm, w.ffn_post_norm = layers("post_attention_norm"), layers("post_ffw_norm")
    if spec.rope_pairing == "neox":
        _to_normal_pairing(c, w)
    if start == 0 or (end == c.n_layers and c.tied_output):
        embd = _matrix(tensors, "token_embd.weight", dtype, quantized)    # (V, D)
        if start == 0:
            w.token_embd = embd
    if end == c.n_layers:
        w.output_norm = _matrix(tensors, "output_norm.weight", dtype)
        head = embd if c.tied_output else _matrix(tensors, "output.weight", dtype, quantized)
        w.output = head if isinstance(head, QMatrix) else np.ascontiguousarray(head)   # (V, D)
    return config, w


def _to_normal_pairing(c: ModelConfig, w: ShardWeights) -> None:
    """Permute q/k rows (projection, bias, per-head norms) from neox to normal RoPE pairing."""
    rows = qkv_order(c.n_heads, c.n_kv_heads, c.head_dim, c.rope_dims)
    w.wqkv = _take_rows(w.wqkv, rows)
    if w.qkv_bias is not None:
        w.qkv_bias = np.ascontiguousarray(w.qkv_bias[:, rows])
    head = head_order(c.head_dim, c.rope_dims)
    if w.q_norm is not None:
        w.q_norm, w.k_norm = np.ascontiguousarray(w.q_norm[:, head]), np.ascontiguousarray(w.k_norm[:, head])


def _take_rows(m, rows: np.ndarray):
    """m's rows in the order `rows` gives, in whatever form m is held: float arrays (L, N, K),
    a QStack, or a QLayers of QMatrix/QRows (quantized rows are independent, so a permutation is
    a gather of whole rows of blocks). A QRows part keeps its rows: the q/k permutation never moves
    a row out of its own tensor."""
    if isinstance(m, QStack):
        return QStack(m.kind, np.ascontiguousarray(m.data[:, rows]), m.cols)
    if isinstance(m, QLayers):
        return QLayers(tuple(_take_matrix_rows(x, rows) for x in m.layers))
    return np.ascontiguousarray(m[:, rows])


def _take_matrix_rows(m: QMatrix | QRows, rows: np.ndarray) -> QMatrix | QRows:
    if isinstance(m, QMatrix):
        return QMatrix(m.kind, np.ascontiguousarray(m.data[rows]), m.cols)
    parts, at = [], 0
    for p in m.parts:
        mine = rows[at:at + p.rows] - at
        if mine.size != p.rows or mine.min() < 0 or mine.max() >= p.rows:
            raise UnsupportedModel(f"a q/k row permutation crosses the fused tensor's {p.kind} part")
        parts.append(QMatrix(p.kind, np.ascontiguousarray(p.data[mine]), p.cols))
        at += p.rows
    return QRows(tuple(parts))
