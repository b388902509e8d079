"""A shard's weights moved onto the device (kernels.gpu.device): matrices in their GGUF blocks where
the device has a kernel for the kind, float16 otherwise (kernels.gpu.matrix); norms, biases and
RoPE frequencies in float32 / float64. A range's stack of one kind goes up in one copy, each
layer a view of it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.gpu.matrix import BLOCK_KINDS, DeviceMatrix, from_parts, upload_matrix
from kernels.gpu.ops import QKExtras
from services.modelstore.quantized import QLayers, QStack
from services.modelstore.weights import ShardWeights

F32 = np.float32


@dataclass(frozen=True)
class DeviceLayer:
    attn_norm: object          # (D,) float32
    wqkv: DeviceMatrix
    wo: DeviceMatrix
    ffn_norm: object
    w_gate_up: DeviceMatrix
    w_down: DeviceMatrix
    qk: QKExtras
    attn_post_norm: object     # (D,) or None
    ffn_post_norm: object


@dataclass(frozen=True)
class DeviceWeights:
    layers: tuple[DeviceLayer, ...]
    token_embd: DeviceMatrix | None
    output_norm: object | None
    output: DeviceMatrix | None
    nbytes: int                # on the device, a tied head counted once


def _stack(dev, s, n: int) -> list[DeviceMatrix]:
    """One DeviceMatrix per layer of a stacked weight (L, rows, cols) float, QStack or QLayers."""
    if isinstance(s, QLayers):
        return [upload_matrix(dev, m) for m in s.layers]
    if isinstance(s, QStack) and s.kind in BLOCK_KINDS:
        data = dev.constant(s.data)                                   # (L, rows, row bytes): one copy
        return [from_parts(dev, [(s.kind, data[i])], s.cols) for i in range(n)]
    if isinstance(s, QStack):                                          # a kind without a device kernel
        return [upload_matrix(dev, s[i]) for i in range(n)]
    a = np.asarray(s)
    data = dev.constant(np.ascontiguousarray(a, dtype=np.float16).view(np.uint8))   # (L, rows, 2 cols)
    return [from_parts(dev, [("f16", data[i])], int(a.shape[2])) for i in range(n)]


def _vectors(dev, a, n: int) -> list:
    if a is None:
        return [None] * n
    data = dev.constant(np.asarray(a, dtype=F32))
    return [data[i] for i in range(n)]


def upload_weights(dev, w: ShardWeights, qkv_dim: int, head_dim: int) -> DeviceWeights:
    """`w` (host: float arrays, QStack, QLayers, QMatrix) on `dev`."""
    n = w.end - w.start
    mats = {k: _stack(dev, getattr(w, k), n) for k in ("wqkv", "wo", "w_gate_up", "w_down")}
    vecs = {k: _vectors(dev, getattr(w, k), n) for k in ("attn_norm", "ffn_norm", *ShardWeights.LAYER_EXTRAS)}
    absent_bias, absent_norm = dev.zeros(qkv_dim, F32), dev.zeros(head_dim, F32)   # never read (flags off)
    layers = []
    for i in range(n):
        bias, qn, kn = vecs["qkv_bias"][i], vecs["q_norm"][i], vecs["k_norm"][i]
        qk = QKExtras(bias if bias is not None else absent_bias, bias is not None,
                      qn if qn is not None else absent_norm, kn if kn is not None else absent_norm,
                      qn is not None)
        layers.append(DeviceLayer(vecs["attn_norm"][i], mats["wqkv"][i], mats["wo"][i], vecs["ffn_norm"][i],
                                  mats["w_gate_up"][i], mats["w_down"][i], qk, vecs["attn_post_norm"][i],
                                  vecs["ffn_post_norm"][i]))
    embd = upload_matrix(dev, w.token_embd) if w.token_embd is not None else None
    if w.output is None:
        output = None
    elif w.output is w.token_embd:
        output = embd                                                   # tied: one copy
    else:
        output = upload_matrix(dev, w.output)
    output_norm = dev.constant(np.asarray(w.output_norm, F32)) if w.output_norm is not None else None
    arrays = [p.data for ms in mats.values() for m in ms for p in m.parts]
    arrays += [p.data for m in (embd, output) if m is not None for p in m.parts]
    arrays += [v for vs in vecs.values() for v in vs if v is not None] + [output_norm]
    total = _device_bytes(arrays)
    return DeviceWeights(tuple(layers), embd, output_norm, output, total)


def _device_bytes(arrays) -> int:
    """Bytes of the distinct buffers these arrays view (a stack counted once, not once a layer)."""
    bases = {}
    for a in arrays:
        if a is not None:
            base = a.base if a.base is not None else a
            bases[id(base)] = int(base.nbytes)
    return sum(bases.values())
