"""Read the weights of a layer range [start, end) from a llama GGUF file.

Matrices are stored the way the forward consumes them: (out, in), contiguous, as GGUF lays
them out (kernels.matmul says why that is the fast layout); q|k|v and gate|up are fused into
one matrix each, and each kind is stacked over the range's layers (one array per kind). They
are dequantized to a float dtype, or with `quantized` kept in GGUF's blocks wherever the native
kernel multiplies that kind (services/modelstore/quantized.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader
from gguf.quants import dequantize

from kernels.qmatrix import QMatrix
from services.modelstore.gguf_config import ModelConfig, UnsupportedModel, config_from_gguf
from services.modelstore.quantized import QLayers, QStack, kind_of, quantized_matrix, quantized_stack

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

    ARRAYS = ("attn_norm", "wqkv", "wo", "ffn_norm", "w_gate_up", "w_down",
              "token_embd", "output_norm", "output")

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in self.ARRAYS if getattr(self, k) is not None}

    def nbytes(self) -> int:
        """Bytes held, a tied head counted once."""
        return sum(a.nbytes for a in {id(a): a for a in self.arrays().values()}.values())

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


def read_config(path: Path) -> tuple[ModelConfig, GGUFReader]:
    reader = GGUFReader(str(path))
    return config_from_gguf(reader), reader


def read_weights(path: Path, start: int, end: int, dtype=np.float32,
                 quantized: bool = False) -> tuple[ModelConfig, ShardWeights]:
    """The tensors of layers [start, end) (and embeddings / head at the ends) only: dequantized
    to `dtype`, or with `quantized` kept in blocks where the native kernel has their kind."""
    config, reader = read_config(path)
    check_range(config, start, end)
    tensors = {t.name: t for t in reader.tensors}

    def layers(*names: str) -> np.ndarray | QStack | QLayers:
        """Stack over the range one matrix per layer, (out, in) as GGUF stores it, fused along out."""
        if quantized:
            parts = [[_tensor(tensors, f"blk.{i}.{name}.weight") for name in names] for i in range(start, end)]
            stack = quantized_stack(parts)
            if stack is not None:
                return stack
        return np.ascontiguousarray(np.stack([
            np.concatenate([_matrix(tensors, f"blk.{i}.{name}.weight", dtype) for name in names])
            for i in range(start, end)]))

    c = config
    w = ShardWeights(
        start=start, end=end,
        attn_norm=layers("attn_norm"),
        wqkv=layers("attn_q", "attn_k", "attn_v"),
        wo=layers("attn_output"),
        ffn_norm=layers("ffn_norm"),
        w_gate_up=layers("ffn_gate", "ffn_up"),
        w_down=layers("ffn_down"),
    )
    if start == 0 or (end == c.n_layers and c.tied_output):
        embd = _matrix(tensors, "token_embd.weight", dtype, quantized)    # (V, D)
        if start == 0:
            w.token_embd = embd
    if end == c.n_layers:
        w.output_norm = _matrix(tensors, "output_norm.weight", dtype)
        head = embd if c.tied_output else _matrix(tensors, "output.weight", dtype, quantized)
        w.output = head if isinstance(head, QMatrix) else np.ascontiguousarray(head)   # (V, D)
    return config, w

