"""What each layer of a GGUF model weighs: the bytes of its tensors, read from the tensor index.

The placement policy cuts a model by these figures, so they are the GGUF blocks' own sizes
(what a CPU shard holding quantized blocks keeps resident), read without touching the data.
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from pathlib import Path

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from services.modelstore.errors import BadModelFile
from services.modelstore.gguf_meta import _parse_header

_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Footprint:
    """Bytes of each block, and of what only the first (embeddings) and last (norm, head) hold."""
    layer_bytes: tuple[int, ...]
    first_bytes: int           # token_embd: the first shard looks tokens up in it
    last_bytes: int            # output_norm + output (or token_embd again when the head is tied)
    kv_heads: int
    head_dim: int

    @property
    def n_layers(self) -> int:
        return len(self.layer_bytes)

    def kv_bytes_per_layer(self, num_pages: int, page_size: int) -> int:
        """K and V of one layer for a pool of `num_pages` pages (float16, on a CPU as on a GPU)."""
        return 2 * num_pages * page_size * self.kv_heads * self.head_dim * 2


def _nbytes(dims: list[int], qtype: int) -> int:
    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    except (ValueError, KeyError):
        raise BadModelFile(f"tensor of unknown GGML type {qtype}") from None
    n = 1
    for d in dims:
        n *= d
    return n // block * size


def read_footprint(path: str | Path) -> Footprint:
    """The footprint of a llama-style GGUF; BadModelFile when the index does not read."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            meta, cur, n_tensors = _parse_header(mm)
            sizes: dict[str, int] = {}
            for _ in range(n_tensors):
                name = cur.string()
                dims = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
                qtype = cur.scalar("<I")
                cur.scalar("<Q")   # offset of the data: not needed
                sizes[name] = _nbytes(dims, qtype)
    except (OSError, ValueError) as e:
        if isinstance(e, BadModelFile):
            raise
        raise BadModelFile(f"cannot read {path}: {e}") from e
    arch = meta.get("general.architecture")
    n_layers = meta.get(f"{arch}.block_count")
    if not isinstance(n_layers, int) or n_layers <= 0:
        raise BadModelFile(f"{path}: no {arch}.block_count in the metadata")
    layers = [0] * n_layers
    for name, n in sizes.items():
        m = _BLOCK.match(name)
        if m and int(m.group(1)) < n_layers:
            layers[int(m.group(1))] += n
    embd = sizes.get("token_embd.weight", 0)
    head = sizes.get("output.weight", embd)     # tied: the last shard holds the embeddings too
    heads = int(meta.get(f"{arch}.attention.head_count", 1))
    d_model = int(meta.get(f"{arch}.embedding_length", 0))
    return Footprint(layer_bytes=tuple(layers), first_bytes=embd,
                     last_bytes=head + sizes.get("output_norm.weight", 0),
                     kv_heads=int(meta.get(f"{arch}.attention.head_count_kv", heads)),
                     head_dim=int(meta.get(f"{arch}.attention.key_length", d_model // heads)))
