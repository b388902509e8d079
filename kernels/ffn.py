"""The gated feed-forward block: down(act(gate(x)) * up(x)), act SiLU (SwiGLU) or GELU-tanh (GeGLU)."""

from __future__ import annotations

import functools

import numpy as np

from kernels.matmul import matmul
from kernels.native_lib import load

ACTIVATIONS = ("silu", "gelu_tanh")


def silu(xp, x):
    """x * sigmoid(x) in x's dtype (the 1 is a scalar of x's dtype, so no float64 appears)."""
    one = x.dtype.type(1)
    return x / (one + xp.exp(-x))


def _gelu_f16(xp, x16):
    """The GELU of float32 values that are float16s, rounded to float16 (a float16 table's entries)."""
    f32 = xp.float32
    inner = f32(0.7978845608028654) * x16 * (f32(1) + f32(0.044715) * x16 * x16)
    return (f32(0.5) * x16 * (f32(1) + xp.tanh(inner))).astype(xp.float16).astype(f32)


def gelu_tanh(xp, x):
    """0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) as llama.cpp's CPU computes it, in x's dtype:
    looked up in a float16 table (x rounded to float16, the result too), and exact past |x| >= 10."""
    f32 = xp.float32
    y = _gelu_f16(xp, x.astype(xp.float16).astype(f32))
    y = xp.where(x <= -10, f32(0), xp.where(x >= 10, x.astype(f32), y))
    return y.astype(x.dtype, copy=False)


@functools.cache
def gelu_tanh_table() -> np.ndarray:
    """(65536,) float32: gelu_tanh's rounded value of each float16, indexed by its bits (for the C
    library's lb_geglu). Made by the same numpy ops, so a lookup gives gelu_tanh's bits."""
    x16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):                   # infinities and NaNs: entries past |x| >= 10
        table = _gelu_f16(np, x16)
    table.flags.writeable = False
    return table


def gated(xp, gate_up, activation: str = "silu"):
    """gate_up (T, 2F) = [gate | up] from one fused matmul -> act(gate) * up, (T, F)."""
    f = gate_up.shape[-1] // 2
    if activation == "silu" and xp is np and gate_up.dtype == np.float32 and load() is not None:
        return native_swiglu(gate_up)
    gate, up = gate_up[:, :f], gate_up[:, f:]
    act = silu(xp, gate) if activation == "silu" else gelu_tanh(xp, gate)
    return act * up


def native_swiglu(gate_up: np.ndarray) -> np.ndarray:
    """silu(gate) * up by the C library (lb_swiglu: its own exp, so not numpy's bits; the CPU float32
    forward's definition wherever the library is built, its layer loops alike)."""
    gate_up = np.ascontiguousarray(gate_up, dtype=np.float32)
    t, f = gate_up.shape[0], gate_up.shape[1] // 2
    out = np.empty((t, f), np.float32)
    rc = load().lb_swiglu(gate_up.ctypes.data, t, f, out.ctypes.data)
    if rc != 0:
        raise ValueError(f"native swiglu refused gate_up {gate_up.shape} (code {rc})")
    return out


def swiglu(xp, gate_up):
    """gate_up (T, 2F) = [gate | up] -> silu(gate) * up, (T, F)."""
    return gated(xp, gate_up, "silu")


def feed_forward(xp, x, w_gate_up, w_down, split: bool = False, activation: str = "silu"):
    """x (T, D) -> act-gated(x . w_gate_up (2F, D)) . w_down (D, F); weights (out, in), see matmul."""
    return matmul(xp, gated(xp, matmul(xp, x, w_gate_up, split), activation), w_down, split)   # (T, D)
