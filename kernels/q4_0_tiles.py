"""Q4_0 weights regrouped 16 rows a tile ("q4_0_t16", kernels/native/qmatmul.h), for the x86 paths.

GGUF keeps each row's blocks together; the AVX-512 kernel multiplies 16 rows at a time, one in each
32-bit lane (the AVX2 kernel 8 at a time, a tile in two halves), and spent a gather and a transpose
of the rows' loads on every block to put them there.
In a tile, block b of the 16 rows is 288 bytes: their float16 scales, then for k = 0..3 the 16 rows'
quant bytes 4k .. 4k + 3, each row in the lane it is multiplied in; the last rows % 16 rows stay in
GGUF's order after the tiles. The same bytes, moved (a tile is its 16 rows' bytes: tiling happens in
place), and products with the same bits on every code path: those without tiles of their own read
the blocks where the tiles keep them. `bench/qmatmul_ab.py --tiles` times the two orders.

A tiled matrix's data rows are not its rows: only the layer matrices a CPU shard multiplies are tiled
(the weight cache's "quantized_t16" format), never an embedding whose rows are looked up, and
`QMatrix.dequantize` untiles first.
"""

from __future__ import annotations

import numpy as np

TILED = "q4_0_t16"
ROWS = 16
ISA_AVX2 = 1              # qmatmul.h's LB_ISA_AVX2


def _blocks(data: np.ndarray) -> tuple[int, int]:
    rows, row_bytes = data.shape
    if row_bytes % 18:
        raise ValueError(f"Q4_0 rows are whole 18-byte blocks, got rows of {row_bytes} bytes")
    return row_bytes // 18, rows // ROWS * ROWS


def tile(data: np.ndarray) -> np.ndarray:
    """GGUF Q4_0 rows (rows, row bytes) uint8 -> the same bytes in tiles (the definition, in numpy)."""
    nb, full = _blocks(data)
    blocks = data[:full].reshape(full // ROWS, ROWS, nb, 18)                       # tile, row c, block b
    d = blocks[..., :2].transpose(0, 2, 1, 3).reshape(full // ROWS, nb, 32)         # tile, b, (c, 2)
    quads = blocks[..., 2:].reshape(full // ROWS, ROWS, nb, 4, 4).transpose(0, 2, 3, 1, 4)   # tile, b, k, c, 4
    out = np.concatenate([d, quads.reshape(full // ROWS, nb, 256)], axis=2)
    return np.concatenate([out.reshape(full, nb * 18), data[full:]])


def untile(data: np.ndarray) -> np.ndarray:
    """`tile`'s inverse."""
    nb, full = _blocks(data)
    t = data[:full].reshape(full // ROWS, nb, 288)
    d = t[..., :32].reshape(full // ROWS, nb, ROWS, 2).transpose(0, 2, 1, 3)
    qs = t[..., 32:].reshape(full // ROWS, nb, 4, ROWS, 4).transpose(0, 3, 1, 2, 4).reshape(full // ROWS, ROWS, nb, 16)
    out = np.concatenate([d, qs], axis=3)
    return np.concatenate([out.reshape(full, nb * 18), data[full:]])


def wants_tiles(lib) -> bool:
    """Whether this process multiplies on an x86 vector path (AVX2 or AVX-512), the ones that read
    tiles faster than GGUF's order. The plain C path reads tiles block by block (the same bits,
    several times slower): a process that forces it after loading tiled weights (tests) pays that."""
    return lib is not None and int(lib.lb_isa()) >= ISA_AVX2


def tile_in_place(lib, data: np.ndarray) -> None:
    """GGUF Q4_0 rows (rows, row bytes) uint8, writeable and C-contiguous, tiled where they lie (by the
    C library: a tile's worth of memory besides)."""
    if not (data.dtype == np.uint8 and data.ndim == 2 and data.flags.c_contiguous and data.flags.writeable):
        raise ValueError("tiling in place takes a writeable C-contiguous uint8 (rows, row bytes) array")
    nb, _ = _blocks(data)
    rc = lib.lb_q4_0_tile_in_place(data.ctypes.data, data.shape[0], nb * 32)
    if rc == -3:
        raise MemoryError("native q4_0 tiling could not allocate a tile's buffer")
    if rc != 0:
        raise ValueError(f"native q4_0 tiling refused rows of shape {data.shape} (code {rc})")
