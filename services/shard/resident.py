"""What a shard holds in memory for its layers, told to placement so that one plan can mix GPU and
CPU hosts: the bytes its weights take per byte of the GGUF file (placement cuts the model by the
file's bytes), and what a GPU shard keeps on the device besides weights and KV.

Weights by where they run: a CPU shard keeps the blocks its C kernel multiplies (float32 for the
rest, and everything with --weights float32); a GPU shard keeps the blocks its CUDA kernels read
(kernels.gpu.matrix.BLOCK_KINDS) and float16 for the rest. Norms and biases stay float32.
"""

from __future__ import annotations

import mmap
import re
from pathlib import Path

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from kernels.gpu.matrix import BLOCK_KINDS
from kernels.gpu.ops import KERNEL_ROWS, SCRATCH_FLOATS
from services.modelstore.gguf_meta import _parse_header
from services.modelstore.quantized import KIND_OF

_BLOCK = re.compile(r"^blk\.(\d+)\.")
# A GPU process's own share of the device before any buffer of ours: the CUDA context, cuBLAS's
# workspace, the compiled kernels (measured elsewhere at 300-500 MiB; taken at the top).
CUDA_CONTEXT = 512 << 20
# The prompt chunk a GPU shard's eager buffers are counted for: the scheduler's default token budget.
PROMPT_ROWS = 512


def _resident(dims: list[int], qtype: GGMLQuantizationType, device: str, fmt: str) -> tuple[int, int]:
    """(file bytes, resident bytes) of one tensor."""
    block, size = GGML_QUANT_SIZES[qtype]
    n = 1
    for d in dims:
        n *= d
    stored = n // block * size
    if len(dims) < 2:
        return stored, 4 * n                                  # norms, biases: float32
    kind = KIND_OF.get(qtype)
    if device == "cuda":
        return stored, stored if fmt == "quantized" and kind in BLOCK_KINDS else 2 * n
    return stored, stored if fmt in ("quantized", "quantized_t16") and kind is not None else 4 * n


def weight_scale(path: str | Path, device: str, fmt: str) -> float:
    """Resident bytes per file byte of the layer (or the embeddings, or the head) that grows most."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        _, cur, n_tensors = _parse_header(mm)
        parts: dict[str, list[int]] = {}
        for _ in range(n_tensors):
            name = cur.string()
            dims = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
            qtype = GGMLQuantizationType(cur.scalar("<I"))
            cur.scalar("<Q")
            m = _BLOCK.match(name)
            stored, held = _resident(dims, qtype, device, fmt)
            acc = parts.setdefault(m.group(1) if m else name, [0, 0])
            acc[0] += stored
            acc[1] += held
    return max((held / stored for stored, held in parts.values() if stored), default=1.0)


def gpu_reserve(meta: dict, num_pages: int, page_size: int) -> int:
    """Bytes a GPU shard keeps beside weights and KV: the CUDA context, the decode graphs' buffers,
    the buffers of a prompt chunk of PROMPT_ROWS tokens and the dequantization scratch."""
    arch = meta["general.architecture"]
    d = int(meta[f"{arch}.embedding_length"])
    heads = int(meta[f"{arch}.attention.head_count"])
    kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))
    dh = int(meta.get(f"{arch}.attention.key_length", d // heads))
    ffn = int(meta[f"{arch}.feed_forward_length"])
    vocab = len(meta.get("tokenizer.ggml.tokens", ())) or int(meta.get(f"{arch}.vocab_size", 0))
    width = min(num_pages, -(-int(meta.get(f"{arch}.context_length", 2048)) // page_size))

    def buffers(rows: int, table_rows: int, logits: int) -> int:
        floats = rows * (3 * d + (heads + 2 * kv_heads) * dh + 2 * heads * dh + 3 * ffn) + logits * vocab
        return 4 * (floats + 6 * rows + table_rows * width)
    return (CUDA_CONTEXT + buffers(KERNEL_ROWS, KERNEL_ROWS, KERNEL_ROWS)
            + buffers(PROMPT_ROWS, PROMPT_ROWS, PROMPT_ROWS) + 4 * SCRATCH_FLOATS)
