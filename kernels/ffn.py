"""The llama feed-forward block: SwiGLU, down(silu(gate(x)) * up(x))."""

from __future__ import annotations

import numpy as np

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


def feed_forward(xp, x, w_gate_up, w_down, split: bool = False):
    """x (T, D) -> swiglu(x . w_gate_up (2F, D)) . w_down (D, F); weights (out, in), see matmul."""
    return matmul(xp, swiglu(xp, matmul(xp, x, w_gate_up, split)), w_down, split)   # (T, D)


def swiglu_into(gate, up, out, tmp):
    """silu(gate) * up of numpy (T, F) views into out, tmp (T, F) scratch: swiglu's ufuncs, no allocation."""
    np.negative(gate, out=tmp)
    np.exp(tmp, out=tmp)
    np.add(gate.dtype.type(1), tmp, out=tmp)
    np.divide(gate, tmp, out=tmp)
    return np.multiply(tmp, up, out=out)
