"""Every CUDA kernel of kernels/gpu/cuda, declared once: its name and source file, its parameters
(type and name, in the order of the CUDA signature), the grid and block it is launched with, and
its numpy reference (same parameters). Both devices launch through `bind`, which checks the
arguments against the declaration; a test checks the declarations against the compiled PTX.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from kernels.gpu import ref_ops, ref_quant

# Parameter types: pointers (the numpy dtype of the array passed) and scalars.
POINTERS = {"f32*": np.float32, "f16*": np.float16, "u8*": np.uint8, "i32*": np.int32, "f64*": np.float64}
SCALARS = ("i32", "f32", "f64")
I32_MAX = 2**31 - 1
MAX_BLOCK = 1024
MAX_GRID = (I32_MAX, 65535, 65535)

NORM_THREADS = 256     # rms_norm, add_rms_norm, gather_rows: a block per row
FLAT_THREADS = 256     # one thread per element
QM_WARPS, QM_ROWS = 4, 16         # qmatmul.cu: output rows and activation rows per block
ATT_WARPS = 8                     # attention.cu
TOP_THREADS = 1024                 # sampling.cu
MAX_HEAD_DIM = 256                # rope_kv.cu and attention.cu hold a head in 8 lanes' worth


class BadLaunch(ValueError):
    """Arguments that do not fit a kernel's declaration, or a launch shape CUDA would refuse."""


@dataclass(frozen=True)
class Kernel:
    name: str
    source: str                                  # file in kernels/gpu/cuda
    params: tuple[tuple[str, str], ...]          # (type, name)
    shape: Callable[[dict], tuple[tuple[int, ...], tuple[int, ...]]]   # args by name -> (grid, block)
    reference: Callable
    # What the kernel's vector loads need: {pointer: byte alignment} of the address, and
    # {int parameter: n} a multiple of n (a row stride in elements), else a misaligned-address fault.
    aligned: tuple[tuple[str, int], ...] = ()
    multiple: tuple[tuple[str, int], ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for _, n in self.params)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _p(spec: str) -> tuple[tuple[str, str], ...]:
    """'f32* x, i32 rows' -> (('f32*', 'x'), ('i32', 'rows'))."""
    return tuple(tuple(p.split()) for p in spec.split(","))


def _head_block(dh: int) -> int:
    return 32 * _cdiv(dh, 32)


# quant.cuh reads these kinds' blocks in words, not bytes: Q4_1's 20-byte blocks 4 bytes at a time,
# Q4_K's nibbles (at 16 in a 144-byte block) 16 at a time. Their matrices start so aligned (each is
# its own allocation, or a layer of a stack of whole rows).
BLOCK_ALIGN = {"q4_1": 4, "q4_k": 16}


def _blocks_aligned(kind: str) -> tuple[tuple[str, int], ...]:
    return (("w", BLOCK_ALIGN[kind]),) if kind in BLOCK_ALIGN else ()


def _kernels() -> dict[str, Kernel]:
    ks = [
        Kernel("rms_norm", "norm.cu", _p("f32* x, f32* w, f32* out, i32 rows, i32 d, f32 eps"),
               lambda a: ((a["rows"],), (NORM_THREADS,)), ref_ops.rms_norm),
        Kernel("add_rms_norm", "norm.cu", _p("f32* h, f32* delta, f32* w, f32* out, i32 rows, i32 d, f32 eps"),
               lambda a: ((a["rows"],), (NORM_THREADS,)), ref_ops.add_rms_norm),
        Kernel("add_rows", "norm.cu", _p("f32* h, f32* delta, i32 n"),
               lambda a: ((_cdiv(a["n"], FLAT_THREADS),), (FLAT_THREADS,)), ref_ops.add_rows),
        Kernel("gather_rows", "norm.cu", _p("f32* src, i32* idx, f32* dst, i32 n_rows, i32 d"),
               lambda a: ((a["n_rows"],), (NORM_THREADS,)), ref_ops.gather_rows),
        Kernel("softcap", "norm.cu", _p("f32* x, i32 n, f32 cap"),
               lambda a: ((_cdiv(a["n"], FLAT_THREADS),), (FLAT_THREADS,)), ref_ops.softcap),
        Kernel("swiglu", "gates.cu", _p("f32* gu, f32* out, i32 rows, i32 f"),
               lambda a: ((_cdiv(a["rows"] * a["f"], FLAT_THREADS),), (FLAT_THREADS,)), ref_ops.swiglu),
        Kernel("geglu", "gates.cu", _p("f32* gu, f32* out, i32 rows, i32 f"),
               lambda a: ((_cdiv(a["rows"] * a["f"], FLAT_THREADS),), (FLAT_THREADS,)), ref_ops.geglu),
        Kernel("qkv_rope_kv", "rope_kv.cu",
               _p("f32* qkv, f32* bias, i32 has_bias, f32* q_norm, f32* k_norm, i32 has_qk_norm, f32 eps, "
                  "i32* pos, i32* slot, f64* freqs, f64 mscale, i32 n_rot, i32 t_rows, i32 n_heads, i32 n_kv, "
                  "i32 dh, f32* q_out, f16* k_cache, f16* v_cache"),
               lambda a: ((a["t_rows"], a["n_heads"] + 2 * a["n_kv"]), (_head_block(a["dh"]),)),
               ref_ops.qkv_rope_kv),
        Kernel("paged_attention", "attention.cu",
               _p("f32* q, f16* k_cache, f16* v_cache, i32* table, i32 table_stride, i32* row_seq, i32* row_len, "
                  "i32 t_rows, i32 n_heads, i32 n_kv, i32 dh, i32 page_size, i32 window, f32 scale, f32* out"),
               lambda a: ((a["t_rows"], a["n_heads"]), (32 * ATT_WARPS,)), ref_ops.paged_attention),
        Kernel("greedy_top", "sampling.cu",
               _p("f32* logits, i32 v, i32* row_idx, i32 rows, i32 n_top, i32* token, f32* logprob, f32* rowmax, "
                  "i32* top_ids, f32* top_lp"),
               lambda a: ((a["rows"],), (TOP_THREADS,)), ref_ops.greedy_top),
    ]
    for kind in ref_quant.KINDS:
        ks += [
            Kernel(f"qmatvec_{kind}", "qmatmul.cu",
                   _p("u8* w, i32 n_rows, i32 k, f32* x, f32* out, i32 ldo, i32 col0"),
                   lambda a: ((_cdiv(a["n_rows"], QM_WARPS),), (32 * QM_WARPS,)),
                   partial(ref_quant.qmatvec, kind), aligned=(("x", 16),) + _blocks_aligned(kind)),
            Kernel(f"qmatmul_{kind}", "qmatmul.cu",
                   _p("u8* w, i32 n_rows, i32 k, f32* x, i32 ldx, i32 t_rows, f32* out, i32 ldo, i32 col0"),
                   lambda a: ((_cdiv(a["n_rows"], QM_WARPS), _cdiv(a["t_rows"], QM_ROWS)), (32 * QM_WARPS,)),
                   partial(ref_quant.qmatmul, kind), aligned=_blocks_aligned(kind)),
            Kernel(f"dequant_{kind}", "qmatmul.cu", _p("u8* w, i32 n_rows, i32 k, f32* out"),
                   lambda a: ((_cdiv(a["n_rows"] * (a["k"] // 32), FLAT_THREADS),), (FLAT_THREADS,)),
                   partial(ref_quant.dequant, kind), aligned=_blocks_aligned(kind)),
            Kernel(f"embed_{kind}", "qmatmul.cu", _p("u8* w, i32 k, i32* ids, i32 t_rows, f32 scale, f32* out"),
                   lambda a: ((a["t_rows"],), (128,)), partial(ref_quant.embed, kind), aligned=_blocks_aligned(kind)),
        ]
    return {k.name: k for k in ks}


KERNELS = _kernels()


def address(a) -> int:
    """The address of an array's first element: a cupy array's on the device, a numpy array's on the host."""
    face = getattr(a, "__cuda_array_interface__", None) or a.__array_interface__
    return int(face["data"][0])


def bind(kernel: Kernel, args: tuple) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Check `args` against the kernel's parameters and return its (grid, block); BadLaunch when an
    array has the wrong dtype, is not contiguous or not aligned as its loads need, a scalar is out
    of its type, or the launch shape is one CUDA refuses (an empty grid included: launch nothing
    for no rows)."""
    if len(args) != len(kernel.params):
        raise BadLaunch(f"{kernel.name} takes {len(kernel.params)} arguments, got {len(args)}")
    for (kind, name), a in zip(kernel.params, args):
        if kind in POINTERS:
            dtype = getattr(a, "dtype", None)
            if dtype != POINTERS[kind] or not a.flags.c_contiguous:
                raise BadLaunch(f"{kernel.name}: {name} must be a contiguous {np.dtype(POINTERS[kind])} array, "
                                f"got {dtype} {getattr(a, 'shape', type(a).__name__)}")
        elif kind == "i32":
            if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)) or not -I32_MAX - 1 <= a <= I32_MAX:
                raise BadLaunch(f"{kernel.name}: {name} must be an int32, got {a!r}")
        elif not isinstance(a, (int, float, np.integer, np.floating)) or isinstance(a, (bool, np.bool_)):
            raise BadLaunch(f"{kernel.name}: {name} must be a number, got {a!r}")
    by_name = dict(zip(kernel.names, args))
    for name, n in kernel.aligned:
        if address(by_name[name]) % n:
            raise BadLaunch(f"{kernel.name}: {name} is read {n} bytes at a time: its address must be a multiple "
                            f"of {n} (a view that starts mid-row?)")
    for name, n in kernel.multiple:
        if by_name[name] % n:
            raise BadLaunch(f"{kernel.name}: {name} must be a multiple of {n}, got {by_name[name]}")
    grid, block = kernel.shape(by_name)
    threads = int(np.prod(block))
    if threads > MAX_BLOCK or threads % 32:
        raise BadLaunch(f"{kernel.name}: a block of {block} threads (whole warps, at most {MAX_BLOCK})")
    if not all(0 < g <= m for g, m in zip(grid, MAX_GRID)):
        raise BadLaunch(f"{kernel.name}: grid {grid} is empty or past CUDA's limits {MAX_GRID[:len(grid)]}")
    return tuple(int(g) for g in grid), tuple(int(b) for b in block)
