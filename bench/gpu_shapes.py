"""Models of a given shape with random weights in GGUF blocks, built in memory for bench/gpu.py:
the shapes the GPU path is measured on (the default model's, and Llama 3.2 1B's), no file needed.

Quant bytes are random; each block's float16 scales are set so that weights stay of the order of
1/sqrt(d), so activations stay finite through the layers (the timing does not depend on values).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.qmatrix import QMatrix
from kernels.gpu.ref_quant import BLOCKS
from services.modelstore.gguf_config import ModelConfig
from services.modelstore.quantized import QStack
from services.modelstore.weights import ShardWeights


@dataclass(frozen=True)
class Shape:
    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab: int
    kind: str              # the layers' block kind; the (tied) embedding is Q8_0

    def config(self, context: int = 4096) -> ModelConfig:
        return ModelConfig(arch="llama", n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads,
                           n_kv_heads=self.n_kv_heads, head_dim=self.head_dim, ffn_dim=self.ffn_dim,
                           vocab_size=self.vocab, rope_base=10000.0, rope_dims=self.head_dim, norm_eps=1e-5,
                           tied_output=True, context_length=context)


SHAPES = {
    "tiny": Shape("tiny", 2, 64, 4, 2, 16, 128, 300, "q4_0"),            # bench/gpu.py's own test
    "smollm2-135m": Shape("smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, "q4_1"),
    "llama-1b": Shape("llama-1b", 16, 2048, 32, 8, 64, 8192, 128256, "q4_k"),
}

# (byte offset, float16 value) of each kind's scales in a block: small d, no offset to speak of.
_SCALES = {"q4_0": [(0, 0.02)], "q4_1": [(0, 0.02), (2, -0.15)], "q8_0": [(0, 0.002)],
           "q4_k": [(0, 0.0005), (2, 0.0005)], "q5_k": [(0, 0.0005), (2, 0.0005)], "q6_k": [(208, 0.0005)]}


def random_blocks(kind: str, rows: int, cols: int, rng, layers: int = 0) -> np.ndarray:
    """Random (layers, rows, row bytes) (or (rows, row bytes) for layers 0) uint8 blocks of `kind`."""
    per, nbytes = BLOCKS[kind]
    shape = ((layers,) if layers else ()) + (rows, cols // per, nbytes)
    b = rng.integers(0, 256, size=shape, dtype=np.uint8)
    for at, value in _SCALES[kind]:
        b[..., at:at + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    return b.reshape(shape[:-2] + (cols // per * nbytes,))


def random_weights(s: Shape, seed: int = 0) -> ShardWeights:
    """All layers of `s`, the embedding tied to the head."""
    rng = np.random.default_rng(seed)
    L, d, f = s.n_layers, s.d_model, s.ffn_dim
    qkv = (s.n_heads + 2 * s.n_kv_heads) * s.head_dim

    def stack(rows: int, cols: int) -> QStack:
        return QStack(s.kind, random_blocks(s.kind, rows, cols, rng, L), cols)
    ones = np.ones((L, d), np.float32)
    embd = QMatrix("q8_0", random_blocks("q8_0", s.vocab, d, rng), d)
    return ShardWeights(start=0, end=L, attn_norm=ones, wqkv=stack(qkv, d), wo=stack(d, s.n_heads * s.head_dim),
                        ffn_norm=ones.copy(), w_gate_up=stack(2 * f, d), w_down=stack(d, f),
                        token_embd=embd, output_norm=np.ones(d, np.float32), output=embd)


def weight_bytes(w: ShardWeights) -> int:
    return w.nbytes()
