"""A llama-family GGUF of a given shape with random weights, made on demand into the cache.

    python3 -m bench.synthetic 8b [--quant q4_0|q8_0|q4_k_m] [--seed 0]       # prints the file's path
    python3 -m bench.synthetic --layers 2 --dim 256 --ffn 512 --heads 4 --kv-heads 2 [--tied]

Speed and memory do not depend on the weights' values, so a file of the right shape and block
kinds measures them: no model package ships a 7B or 70B file. The presets are Llama 3.2 1B and 3B
(tied head) and Llama 3 8B and 70B, with the default model's tokenizer (its 49152 tokens make the
vocabulary). Blocks are random bytes with their fp16 scales set so that a weight's spread is about
1/sqrt(columns) (never below fp16's smallest normal number): the forward gives finite numbers, and
writing an 8B file is a matter of seconds, not a quantizer's minutes. The kinds follow llama.cpp's
choice per tensor for the file type (llama_tensor_get_type): Q4_0 and Q4_K_M put the head in Q6_K;
Q4_K_M puts attn_v and ffn_down in Q6_K on the layers its use_more_bits picks (attn_v in Q5_K
elsewhere on an 80-layer model) and the rest in Q4_K (Q5_0 / Q8_0 where a row is not whole 256-weight
super-blocks); Q8_0 is Q8_0 throughout.

Files land in $LLMBUS_CACHE/synthetic/ (default ~/.cache/llmbus), named by shape, kind and seed, so
every process and bench reuses one file; the same arguments give the same bytes. A file is written
under a temporary name and renamed into place, with a lock so that two makers do not write it twice.
Never commit one.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.modelstore.gguf_meta import read_metadata  # noqa: E402
from services.modelstore.pull import cache_dir, pull  # noqa: E402

FORMAT = 1            # bump when the bytes written for the same arguments change


@dataclass(frozen=True)
class Shape:
    n_layers: int
    d_model: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    tied: bool = False                   # the head is the embedding (no output.weight)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def label(self) -> str:
        return (f"{self.n_layers}l{self.d_model}d{self.ffn_dim}f{self.n_heads}h{self.n_kv_heads}kv"
                + ("-tied" if self.tied else ""))


PRESETS = {
    "1b": Shape(16, 2048, 8192, 32, 8, tied=True),        # Llama 3.2 1B
    "3b": Shape(28, 3072, 8192, 24, 8, tied=True),        # Llama 3.2 3B
    "8b": Shape(32, 4096, 14336, 32, 8),                  # Llama 3 8B
    "70b": Shape(80, 8192, 28672, 64, 8),                 # Llama 3 70B
}
QUANTS = ("q4_0", "q8_0", "q4_k_m")
FILE_TYPE = {"q4_0": 2, "q8_0": 7, "q4_k_m": 15}          # llama_ftype, as general.file_type
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
# llama.cpp's kind where a row is not whole 256-weight super-blocks.
FALLBACK = {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}


class BadShape(ValueError):
    """A shape or kind the file cannot be written in."""


def check(shape: Shape, quant: str) -> None:
    if quant not in QUANTS:
        raise BadShape(f"quant {quant!r}: expected one of {', '.join(QUANTS)}")
    if min(shape.n_layers, shape.d_model, shape.ffn_dim, shape.n_heads, shape.n_kv_heads) <= 0:
        raise BadShape(f"every size must be positive: {shape}")
    if shape.d_model % shape.n_heads or shape.n_heads % shape.n_kv_heads:
        raise BadShape(f"{shape.n_heads} heads do not divide width {shape.d_model}, "
                       f"or {shape.n_kv_heads} KV heads do not divide the heads")
    if shape.head_dim % 2:
        raise BadShape(f"head dimension {shape.head_dim} is odd (RoPE rotates pairs)")
    if shape.d_model % 32 or shape.ffn_dim % 32:
        raise BadShape(f"width {shape.d_model} and FFN {shape.ffn_dim} must be multiples of 32 (one block)")


def use_more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's layers that get more bits in its _M mixes: the first and last eighth, and every third."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def kind_for(quant: str, name: str, layer: int | None, n_layers: int, cols: int) -> QT:
    """The block kind of tensor `name` (of `layer`, rows of `cols` weights) in file type `quant`."""
    if quant == "q8_0":
        return QT.Q8_0
    if name == "output":
        kind = QT.Q6_K
    elif quant == "q4_0":
        kind = QT.Q4_0
    elif name in ("attn_v", "ffn_down") and layer is not None and use_more_bits(layer, n_layers):
        kind = QT.Q6_K
    elif name == "attn_v" and n_layers == 80:                   # llama.cpp's 70B rule
        kind = QT.Q5_K
    else:
        kind = QT.Q4_K
    per = GGML_QUANT_SIZES[kind][0]
    return FALLBACK.get(kind, kind) if cols % per else kind


# Where each kind keeps its fp16 scale(s) in a block, and how to keep its quants real-looking.
_D_AT = {QT.Q4_0: 0, QT.Q4_1: 0, QT.Q5_0: 0, QT.Q5_1: 0, QT.Q8_0: 0, QT.Q4_K: 0, QT.Q5_K: 0, QT.Q6_K: 208}
_MIN_AT = {QT.Q4_1: 2, QT.Q5_1: 2, QT.Q4_K: 2, QT.Q5_K: 2}     # the block's min scale, set from d
_MIN_PER_D = 7.5                        # min scale over d: a sub-block's weights centred near zero
_SMALLEST = np.float32(2.0 ** -14)      # fp16's smallest normal number


def _raw_blocks(rng: np.random.Generator, kind: QT, n_blocks: int) -> np.ndarray:
    """(n_blocks, block bytes) uint8 of random bits, with the parts that real files never hold
    tamed: Q8_0 quants of -128 (a quantizer stops at -127) and Q6_K's 8-bit scales cut to +-16."""
    size = GGML_QUANT_SIZES[kind][1]
    n = n_blocks * size
    b = rng.bit_generator.random_raw(-(-n // 8)).view(np.uint8)[:n].reshape(n_blocks, size)
    if kind == QT.Q8_0:
        q = b[:, 2:].view(np.int8)
        np.maximum(q, -127, out=q)
    elif kind == QT.Q6_K:
        sc = b[:, 192:208].view(np.int8)
        np.right_shift(sc, 3, out=sc)
    return b


def _set_scales(b: np.ndarray, kind: QT, d: np.ndarray) -> None:
    at = _D_AT[kind]
    b[:, at:at + 2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    if kind in _MIN_AT:
        m = _MIN_AT[kind]
        b[:, m:m + 2] = (d * _MIN_PER_D).astype(np.float16).view(np.uint8).reshape(-1, 2)


_UNIT: dict[QT, float] = {}


def _unit_spread(kind: QT) -> float:
    """The rms of a weight of random blocks of `kind` whose scale d is 1: measured once, by gguf's
    own dequantizer, so no kind's arithmetic is written out twice."""
    if kind not in _UNIT:
        b = _raw_blocks(np.random.default_rng(12345), kind, 256)
        _set_scales(b, kind, np.ones(len(b), np.float32))
        _UNIT[kind] = float(np.sqrt(np.mean(np.square(dequantize(b, kind), dtype=np.float64))))
    return _UNIT[kind]


def random_matrix(rng: np.random.Generator, kind: QT, rows: int, cols: int) -> np.ndarray:
    """(rows, row bytes) uint8 blocks of `kind` whose weights spread about 1/sqrt(cols)."""
    per, size = GGML_QUANT_SIZES[kind]
    b = _raw_blocks(rng, kind, rows * cols // per)
    jitter = rng.uniform(0.75, 1.25, len(b)).astype(np.float32)      # blocks differ, as real ones do
    d = np.maximum(jitter * np.float32(1 / (np.sqrt(cols) * _unit_spread(kind))), _SMALLEST)
    _set_scales(b, kind, d)
    return b.reshape(rows, cols // per * size)


def tokenizer_fields(model: Path) -> dict:
    """The tokenizer.* metadata of a GGUF (the default model's)."""
    return {k: v for k, v in read_metadata(model).items() if k.startswith("tokenizer.")}


def add_tokenizer(writer: GGUFWriter, fields: dict) -> None:
    for key, value in fields.items():
        if isinstance(value, bool):
            writer.add_key_value(key, value, GGUFValueType.BOOL)
        elif isinstance(value, int):
            writer.add_key_value(key, value, GGUFValueType.UINT32)
        elif isinstance(value, str):
            writer.add_key_value(key, value, GGUFValueType.STRING)
        else:
            writer.add_array(key, [int(v) for v in value] if isinstance(value, np.ndarray) else list(value))


def tensor_plan(shape: Shape, quant: str, vocab: int) -> list[tuple[str, QT, int, int]]:
    """(name, kind, rows, cols) of every tensor, in the file's order; norms are F32 (rows 1)."""
    d, f, kv = shape.d_model, shape.ffn_dim, shape.n_kv_heads * shape.head_dim
    out = {"attn_q": d, "attn_k": kv, "attn_v": kv, "attn_output": d, "ffn_gate": f, "ffn_up": f, "ffn_down": d}
    cols = {"attn_output": shape.n_heads * shape.head_dim, "ffn_down": f}
    # A tied embedding is the head, and takes the head's kind (as llama.cpp does).
    embd = kind_for(quant, "output" if shape.tied else "token_embd", None, shape.n_layers, d)
    plan = [("token_embd.weight", embd, vocab, d)]
    for i in range(shape.n_layers):
        plan += [(f"blk.{i}.attn_norm.weight", QT.F32, 1, d), (f"blk.{i}.ffn_norm.weight", QT.F32, 1, d)]
        for m in MATRICES:
            c = cols.get(m, d)
            plan.append((f"blk.{i}.{m}.weight", kind_for(quant, m, i, shape.n_layers, c), out[m], c))
    plan.append(("output_norm.weight", QT.F32, 1, d))
    if not shape.tied:
        plan.append(("output.weight", kind_for(quant, "output", None, shape.n_layers, d), vocab, d))
    return plan


def write(path: Path, shape: Shape, quant: str, tokenizer: dict, seed: int = 0, name: str | None = None) -> Path:
    """Write the model to `path` (in place: see synthetic_model for the cached, atomic way)."""
    check(shape, quant)
    vocab = len(tokenizer["tokenizer.ggml.tokens"])
    w = GGUFWriter(str(path), "llama")
    w.add_name(name or f"synthetic-{shape.label()}-{quant}")
    w.add_file_type(FILE_TYPE[quant])
    w.add_block_count(shape.n_layers)
    w.add_context_length(8192)
    w.add_embedding_length(shape.d_model)
    w.add_feed_forward_length(shape.ffn_dim)
    w.add_head_count(shape.n_heads)
    w.add_head_count_kv(shape.n_kv_heads)
    w.add_rope_freq_base(500000.0)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    add_tokenizer(w, tokenizer)
    plan = tensor_plan(shape, quant, vocab)
    for tname, kind, rows, cols in plan:
        if kind == QT.F32:
            w.add_tensor_info(tname, (cols,), np.dtype(np.float32), cols * 4)
        else:
            per, size = GGML_QUANT_SIZES[kind]
            w.add_tensor_info(tname, (rows, cols // per * size), np.dtype(np.uint8), rows * cols // per * size,
                              raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _tname, kind, rows, cols in plan:
        if kind == QT.F32:
            w.write_tensor_data((1 + 0.1 * rng.standard_normal(cols)).astype(np.float32))
        else:
            w.write_tensor_data(random_matrix(rng, kind, rows, cols))
    w.close()
    return path


def cached_path(shape: Shape, quant: str, seed: int = 0, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "synthetic" / f"llama-{shape.label()}-{quant}-s{seed}-v{FORMAT}.gguf"


def synthetic_model(shape: Shape | str = "8b", quant: str = "q4_0", seed: int = 0,
                    cache: Path | None = None) -> Path:
    """The path of the cached model of `shape` (a preset's name or a Shape) in `quant`, written
    first if it is missing (the default model is pulled for its tokenizer)."""
    if isinstance(shape, str):
        if shape not in PRESETS:
            raise BadShape(f"no preset {shape!r}: expected one of {', '.join(PRESETS)} or explicit sizes")
        label, shape = shape, PRESETS[shape]
    else:
        label = shape.label()
    check(shape, quant)
    path = cached_path(shape, quant, seed, cache)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)                # another maker may be writing it: wait
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
            try:
                write(tmp, shape, quant, tokenizer_fields(pull()), seed, name=f"synthetic-{label}-{quant}")
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset", nargs="?", choices=sorted(PRESETS), help="a named shape (or give the sizes)")
    ap.add_argument("--quant", choices=QUANTS, default="q4_0")
    ap.add_argument("--seed", type=int, default=0)
    for flag in ("layers", "dim", "ffn", "heads", "kv-heads"):
        ap.add_argument(f"--{flag}", type=int)
    ap.add_argument("--tied", action="store_true", help="explicit sizes: the head is the embedding")
    args = ap.parse_args(argv)
    sizes = (args.layers, args.dim, args.ffn, args.heads, args.kv_heads)
    if args.preset and any(s is not None for s in sizes):
        ap.error("give a preset or explicit sizes, not both")
    if not args.preset and any(s is None for s in sizes):
        ap.error("without a preset, --layers, --dim, --ffn, --heads and --kv-heads are all needed")
    try:
        path = synthetic_model(args.preset or Shape(*sizes, tied=args.tied), args.quant, args.seed)
    except BadShape as e:
        ap.error(str(e))
    print(path)


if __name__ == "__main__":
    main()
