"""`llmbus run shard`: options of a shard runner (imported before numpy loads: keep it light)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def default_threads(shards_here: int = 1) -> int:
    """The cores this process may use, shared among the shard processes on this machine (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, shards_here))


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


def available_memory(device: str) -> int:
    """What this machine can give a shard now: free GPU memory for cuda, else MemAvailable, or
    less where this process's control group limits its memory (a container, a slice)."""
    if device == "cuda":
        import cupy
        return int(cupy.cuda.runtime.memGetInfo()[0])
    from .cgroup import own_room
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
                room = own_room()
                return free if room is None else min(free, room)
    raise OSError("/proc/meminfo has no MemAvailable: give --memory")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, default=None,
                   help="GGUF file (default: the default model, pulled if missing)")
    p.add_argument("--layers", type=parse_layers, default=None,
                   help="layer range A:B, pinned by hand (default: the scheduler places this "
                        "shard by its --memory)")
    p.add_argument("--memory", type=parse_memory, default=None,
                   help="memory this shard offers to placement, weights and KV (e.g. 2G; "
                        "default: free RAM, or free GPU memory with --device cuda)")
    p.add_argument("--codec", default="fp16", choices=("fp32", "fp16", "int8"),
                   help="codec of the activations this shard sends on")
    p.add_argument("--pages", type=int, default=1024, help="KV pages")
    p.add_argument("--page-size", type=int, default=16, help="tokens per KV page")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="where the layers run: cpu (numpy, float32) or cuda (cupy, float16 weights)")
    p.add_argument("--weights", default="auto", choices=("auto", "quantized", "float32"),
                   help="how a cpu shard holds its matrices: GGUF's quantized blocks through the native "
                        "kernel, or dequantized float32 (auto: quantized when the native kernel is built)")
    p.add_argument("--threads", type=positive, default=None,
                   help="threads the native kernels split each matmul and attention call over (any count "
                        "gives the same bits; default: the cores this process may use)")


def build(args: argparse.Namespace, config):
    from kernels.xp import ArrayModuleUnavailable
    from services.modelstore.pull import pull
    from .service import ShardConfig, ShardService, array_module

    if args.device == "cuda":   # fail before loading anything or joining the bus
        try:
            array_module("cuda")
        except ArrayModuleUnavailable as e:
            raise SystemExit(f"llmbus run shard: --device cuda: {e}") from None
    model = args.model or pull()
    if not model.exists():
        raise SystemExit(f"llmbus run shard: no model file at {model}")
    start, end = args.layers or (None, None)
    memory = args.memory or (0 if args.layers else available_memory(args.device))
    shard = ShardConfig(model=model, start=start, end=end, codec=args.codec,
                        num_pages=args.pages, page_size=args.page_size, device=args.device,
                        weights=args.weights, memory=memory,
                        threads=args.threads or default_threads())
    return ShardService(config, shard)
