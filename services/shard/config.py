"""A shard runner's settings, declared once: `llmbus run shard`'s options are derived from this
dataclass (cli.py), and the service reads it. Light: nothing here loads numpy."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from bus.options import option

DEVICES = ("cpu", "cuda")
# "quantized": GGUF's blocks through the native kernel (kernels.qmatmul), 6x fewer bytes a step;
# "float32": dequantized, numpy/OpenBLAS; "auto": quantized where the native kernel was built. Where
# that kernel runs its AVX-512 path, quantized loads as "quantized_t16" (Q4_0 in tiles: kernels.q4_0_tiles).
WEIGHT_FORMATS = ("auto", "quantized", "float32")


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_threads(shards_here: int = 1) -> int:
    """The cores this process may use, shared among the shard processes on this machine (at least 1)."""
    return max(1, usable_cores() // max(1, shards_here))


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of at least 1")
    return int(text)


def parse_layers(spec: str) -> tuple[int, int]:
    a, sep, b = spec.partition(":")
    if not sep or not a.isdigit() or not b.isdigit() or int(a) >= int(b):
        raise argparse.ArgumentTypeError(f"--layers {spec!r}: expected A:B with A < B, e.g. 0:10")
    return int(a), int(b)


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_memory(spec: str) -> int:
    """'512M', '2G', '1.5G' or plain bytes -> bytes (binary units)."""
    s = spec.strip().upper().removesuffix("B").removesuffix("I")
    unit = s[-1:] if s[-1:] in _UNITS else ""
    try:
        n = float(s[:len(s) - len(unit)]) * _UNITS[unit]
    except ValueError:
        n = -1
    if not 0 < n < 1 << 60:
        raise argparse.ArgumentTypeError(f"--memory {spec!r}: expected a size such as 512M or 2G")
    return int(n)


@dataclass(frozen=True)
class ShardConfig:
    model: Path | None = option(None, "GGUF file (default: the default model, pulled if "
                                "missing)", parse=Path)
    start: int | None = None     # None (with end): placed by the scheduler, see `memory`;
    end: int | None = None       # `llmbus run shard --layers A:B` pins them (cli.py)
    codec: str = option("fp16", "codec of the activations this shard sends on: fp32, fp16 or "
                        "int8 (wire/codecs.py)")
    num_pages: int = option(1024, "KV pages", flag="--pages")
    page_size: int = option(16, "tokens per KV page")
    weights: str = option("auto", "how a shard holds its matrices: GGUF's quantized blocks (a cpu "
                          "shard's where the native kernel is built; a cuda shard's always), or "
                          "dequantized (float32 on a cpu, float16 on a GPU)", choices=WEIGHT_FORMATS)
    device: str = option("cpu", "where the layers run: cpu (numpy and the C kernels) or cuda (cupy: "
                         "the GGUF blocks on the GPU, CUDA graphs, sampling there; pip install -e "
                         "'.[gpu]')", choices=DEVICES)
    memory: int | None = option(None, "memory this shard offers to placement, weights and KV "
                                "(e.g. 2G; default: free RAM, or free GPU memory with --device "
                                "cuda, less the GPU shard's own buffers)", parse=parse_memory)
    threads: int | None = option(None, "threads the native kernels split each matmul and "
                                 "attention call over (any count gives the same bits; default: "
                                 "the cores this process may use)", parse=positive)

    def __post_init__(self):
        if self.threads is None:
            object.__setattr__(self, "threads", default_threads())
        if self.threads < 1:
            raise ValueError(f"threads {self.threads}: at least 1")
        if self.model is None:
            raise ValueError("a shard needs its model file")
        if self.device not in DEVICES:
            raise ValueError(f"device {self.device!r}: one of {', '.join(DEVICES)}")
        if self.weights not in WEIGHT_FORMATS:
            raise ValueError(f"weights {self.weights!r}: one of {', '.join(WEIGHT_FORMATS)}")
        import wire   # the codecs' names (wire loads numpy for them: at build, never to parse)
        if self.codec not in wire.ACTIVATION_CODECS:
            raise ValueError(f"codec {self.codec!r}: one of {', '.join(wire.ACTIVATION_CODECS)}")
        if (self.start is None) != (self.end is None):
            raise ValueError("give both ends of the layer range, or neither (placed)")
        if self.start is not None and not 0 <= self.start < self.end:
            raise ValueError(f"layer range {self.start}:{self.end} is empty or negative")
        if self.start is None and not self.memory:
            raise ValueError("a shard placed by the scheduler needs a memory budget > 0")

    @property
    def pinned(self) -> bool:
        return self.start is not None
