"""The launches a forward makes, from the arrays' shapes to each kernel's arguments: the same code
whichever device runs them (kernels.gpu.device). Arrays are device buffers or leading-row views of
them (contiguous); nothing here allocates, so every call can sit inside a captured graph except
`matmul` on more than KERNEL_ROWS rows, which multiplies by cuBLAS (eager prompt chunks)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.gpu.kernels import KERNELS as K
from kernels.gpu.kernels import MAX_HEAD_DIM
from kernels.gpu.matrix import DeviceMatrix

# Up to this many rows a product reads the blocks in the kernel (a decode step, a short chunk);
# past it the blocks are dequantized into scratch, SCRATCH_FLOATS at a time, for cuBLAS.
KERNEL_ROWS = 128
SCRATCH_FLOATS = 16 << 20


class BadShape(ValueError):
    """Arrays that do not fit the op (a model the device kernels cannot run, or a host bug)."""


def rms_norm(dev, x, w, out, eps: float) -> None:
    """out (T, D) = rms_norm(x) * w; out may be x."""
    rows, d = x.shape
    if rows:
        dev.launch(K["rms_norm"], x, w, out, rows, d, eps)


def add_rms_norm(dev, h, delta, w, out, eps: float) -> None:
    """h (T, D) += delta; out = rms_norm(h) * w."""
    rows, d = h.shape
    if rows:
        dev.launch(K["add_rms_norm"], h, delta, w, out, rows, d, eps)


def add_rows(dev, h, delta) -> None:
    """h += delta."""
    if h.size:
        dev.launch(K["add_rows"], h, delta, int(h.size))


def gather_rows(dev, src, idx, dst) -> None:
    """dst (n, D) = src[idx[:n]]."""
    n, d = dst.shape
    if n:
        dev.launch(K["gather_rows"], src, idx, dst, n, d)


def softcap(dev, x, cap: float) -> None:
    if x.size:
        dev.launch(K["softcap"], x, int(x.size), cap)


def gate(dev, gu, out, activation: str) -> None:
    """out (T, F) = act(gu[:, :F]) * gu[:, F:], act "silu" or "gelu_tanh"."""
    rows, f = out.shape
    if rows:
        dev.launch(K["swiglu" if activation == "silu" else "geglu"], gu, out, rows, f)


@dataclass(frozen=True)
class Heads:
    n_heads: int
    n_kv: int
    dh: int

    def __post_init__(self):
        if not 0 < self.dh <= MAX_HEAD_DIM:
            raise BadShape(f"head dim {self.dh}: the device kernels take heads of 1 to {MAX_HEAD_DIM}")
        if self.n_heads % self.n_kv:
            raise BadShape(f"{self.n_heads} heads do not split into {self.n_kv} KV groups")


@dataclass(frozen=True)
class Rope:
    freqs: object         # (n_rot / 2,) float64 on the device: each pair's angle per position
    mscale: float         # cos and sin scaled by it (YaRN, attn_factor)
    n_rot: int


@dataclass(frozen=True)
class QKExtras:
    """What an architecture adds between the q|k|v projection and RoPE, on the device; a flag
    off leaves its array a stand-in the kernel never reads."""
    bias: object          # ((H + 2 KVH) * Dh,) float32
    has_bias: bool
    q_norm: object        # (Dh,) float32
    k_norm: object
    has_qk_norm: bool


def qkv_rope_kv(dev, qkv, extras: QKExtras, eps: float, pos, slot, rope: Rope, heads: Heads, q_out, k_cache,
                v_cache) -> None:
    """q_out (T, H * Dh) <- q of qkv (T, (H + 2 KVH) * Dh) biased, normed and rotated; k likewise, and
    v, into the caches (slots, KVH, Dh) at slot[t] (skipped where < 0)."""
    t = qkv.shape[0]
    if t:
        dev.launch(K["qkv_rope_kv"], qkv, extras.bias, int(extras.has_bias), extras.q_norm, extras.k_norm,
                   int(extras.has_qk_norm), eps, pos, slot, rope.freqs, rope.mscale, rope.n_rot, t,
                   heads.n_heads, heads.n_kv, heads.dh, q_out, k_cache, v_cache)


def attention(dev, q, k_cache, v_cache, table, row_seq, row_len, heads: Heads, page_size: int, window: int,
              scale: float, out) -> None:
    """out (T, H * Dh): each row of q over the keys of its sequence (row_seq) up to row_len, the last
    `window` of them when > 0, read through the page table (S, P)."""
    t = q.shape[0]
    if t:
        dev.launch(K["paged_attention"], q, k_cache, v_cache, table, int(table.shape[1]), row_seq, row_len, t,
                   heads.n_heads, heads.n_kv, heads.dh, page_size, window, scale, out)


def matmul(dev, x, m: DeviceMatrix, out, scratch=None) -> None:
    """out (T, N) = x (T, K) @ W.T. Past KERNEL_ROWS rows, with a scratch buffer, each part is
    dequantized a slab at a time and multiplied by cuBLAS (dev.matmul_into)."""
    t, k = x.shape
    if k != m.cols or out.shape != (t, m.rows):
        raise BadShape(f"x {x.shape} @ W ({m.rows}, {m.cols}).T does not fit out {out.shape}")
    if not t:
        return
    if t <= KERNEL_ROWS or scratch is None:
        for p in m.parts:
            if t == 1:                      # one sequence's decode step: its own kernel
                dev.launch(K[f"qmatvec_{p.kind}"], p.data, p.rows, k, x, out, int(out.shape[1]), p.row0)
            else:
                dev.launch(K[f"qmatmul_{p.kind}"], p.data, p.rows, k, x, k, t, out, int(out.shape[1]), p.row0)
        return
    slab = max(1, min(SCRATCH_FLOATS, scratch.size) // k)
    for p in m.parts:
        for r in range(0, p.rows, slab):
            n = min(slab, p.rows - r)
            w = scratch[:n * k].reshape(n, k)
            dev.launch(K[f"dequant_{p.kind}"], p.data[r:r + n], n, k, w)
            dev.matmul_into(x, w, out, p.row0 + r)


def embed(dev, m: DeviceMatrix, ids, out, scale: float = 1.0) -> None:
    """out (T, D) = rows ids[:T] of the embedding table, times scale."""
    t, d = out.shape
    if len(m.parts) != 1 or d != m.cols:
        raise BadShape(f"an embedding table of one block kind and {d} columns, got {len(m.parts)} parts of {m.cols}")
    if t:
        dev.launch(K[f"embed_{m.parts[0].kind}"], m.parts[0].data, d, ids, t, scale, out)


def greedy_top(dev, logits, row_idx, n_top: int, out) -> None:
    """For each of the rows logits[row_idx] (rows of width V): into `out`, one int32 buffer of
    rows * (3 + 2 n_top), in order: token, logprob (float32 bits), rowmax (bits), top ids
    (rows, n_top), top logprobs (bits)."""
    rows, v = int(row_idx.shape[0]), int(logits.shape[1])
    if not rows:
        return
    cut = np.cumsum([0, rows, rows, rows, rows * n_top, rows * n_top])
    f32 = out.view(np.float32)
    dev.launch(K["greedy_top"], logits, v, row_idx, rows, n_top, out[cut[0]:cut[1]], f32[cut[1]:cut[2]],
               f32[cut[2]:cut[3]], out[cut[3]:cut[4]], f32[cut[4]:cut[5]])
