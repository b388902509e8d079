"""The llama feed-forward block: SwiGLU, down(silu(gate(x)) * up(x))."""

from __future__ import annotations

from kernels.matmul import matmul


def silu(xp, x):
    """x * sigmoid(x) in x's dtype (the 1 is a scalar of x's dtype, so no float64 appears)."""
    one = x.dtype.type(1)
    return x / (one + xp.exp(-x))


def swiglu(xp, gate_up):
    """gate_up (T, 2F) = [gate | up] from one fused matmul -> silu(gate) * up, (T, F)."""
    f = gate_up.shape[-1] // 2
    gate, up = gate_up[:, :f], gate_up[:, f:]
    return silu(xp, gate) * up


def feed_forward(xp, x, w_gate_up, w_down):
    """x (T, D) @ w_gate_up (D, 2F) -> swiglu -> @ w_down (F, D); weights pre-transposed."""
    return matmul(swiglu(xp, matmul(x, w_gate_up)), w_down)           # (T, D)
