"""What other architectures add to llama's layer, in C (kernels/native/ops.c) where it is built:
qwen2's q/k/v biases, qwen3's and gemma3's per-head q/k RMSNorm, gemma3's GELU-tanh gate.

Each gives the bits of the numpy definition it stands for (np.add, kernels.norm.rms_norm,
kernels.ffn.gelu_tanh times up), which is also what runs without the library.
"""

from __future__ import annotations

import numpy as np

from kernels.ffn import gelu_tanh, gelu_tanh_table
from kernels.native_lib import load
from kernels.norm import rms_norm

F32 = np.float32


class ArchOpError(ValueError):
    """Arrays given to an architecture's op do not fit together (shape, dtype or layout)."""


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ArchOpError(what)


def _f32(*arrays) -> bool:
    return all(isinstance(a, np.ndarray) and a.dtype == F32 for a in arrays)


def add_bias(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """x (T, D) += bias (D,) in place; x C-contiguous float32. Returns x."""
    _check(_f32(x, bias) and x.ndim == 2 and x.flags.c_contiguous and x.flags.writeable
           and bias.shape == (x.shape[1],) and bias.flags.c_contiguous,
           f"add_bias takes x (T, D) C-contiguous float32 and bias (D,) float32; got x {x.dtype} {x.shape}, "
           f"bias {getattr(bias, 'dtype', type(bias))} {getattr(bias, 'shape', '')}")
    lib = load()
    if lib is None:
        return np.add(x, bias, out=x)
    _run(lib.lb_add_bias(x.ctypes.data, bias.ctypes.data, x.shape[0], x.shape[1]), "add_bias")
    return x


def rms_norm_heads(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x (T, heads, Dh) float32 normed per head in place (rms_norm over Dh, weight (Dh,)); x a view whose
    heads are contiguous and side by side (q or k inside qkv rows). Returns x."""
    _check(_f32(x, weight) and x.ndim == 3 and x.flags.writeable and x.strides[1:] == (4 * x.shape[2], 4)
           and x.strides[0] % 4 == 0 and x.strides[0] >= 4 * x.shape[1] * x.shape[2]
           and weight.shape == (x.shape[2],) and weight.flags.c_contiguous,
           f"rms_norm_heads takes x (T, heads, Dh) float32 with contiguous heads side by side and weight (Dh,) "
           f"float32; got x {x.dtype} {x.shape} strides {x.strides}, weight {getattr(weight, 'shape', '')}")
    lib = load()
    if lib is None:
        x[...] = rms_norm(np, x, weight, eps)
        return x
    t, heads, dh = x.shape
    _run(lib.lb_rms_norm_heads(x.ctypes.data, t, x.strides[0] // 4, heads, dh, weight.ctypes.data, float(eps)),
         "rms_norm_heads")
    return x


def geglu(gate_up: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """gate_up (T, 2F) = [gate | up] C-contiguous float32 -> gelu_tanh(gate) * up into out (T, F)."""
    _check(_f32(gate_up) and gate_up.ndim == 2 and gate_up.shape[1] % 2 == 0 and gate_up.flags.c_contiguous,
           f"geglu takes gate_up (T, 2F) C-contiguous float32; got {gate_up.dtype} {gate_up.shape}")
    t, f = gate_up.shape[0], gate_up.shape[1] // 2
    if out is None:
        out = np.empty((t, f), F32)
    _check(_f32(out) and out.shape == (t, f) and out.flags.c_contiguous and out.flags.writeable,
           f"geglu's out must be ({t}, {f}) C-contiguous float32; got {out.dtype} {out.shape}")
    lib = load()
    if lib is None:
        return np.multiply(gelu_tanh(np, gate_up[:, :f]), gate_up[:, f:], out=out)
    _run(lib.lb_geglu(gate_up.ctypes.data, t, f, gelu_tanh_table().ctypes.data, out.ctypes.data), "geglu")
    return out


def _run(rc: int, name: str) -> None:
    if rc != 0:
        raise ArchOpError(f"native {name} refused its arguments (code {rc})")
