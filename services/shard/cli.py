"""`llmbus run shard`: the options of a shard runner, derived from its config (config.py;
imported before numpy loads: keep it light)."""

from __future__ import annotations

import argparse

from bus.options import add_options, options_of

from .config import ShardConfig, parse_layers


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


def device_unavailable(device: str) -> str | None:
    """Why a shard cannot run on `device` here (cuda: no cupy or no GPU), or None when it can."""
    from kernels.xp import ArrayModuleUnavailable
    from .service import array_module
    try:
        array_module(device)
    except ArrayModuleUnavailable as e:
        return str(e)
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layers", type=parse_layers, default=None,
                   help="layer range A:B, pinned by hand (default: the scheduler places this "
                        "shard by its --memory)")
    add_options(p, ShardConfig)


def build(args: argparse.Namespace, config):
    from services.modelstore.pull import pull
    from .service import ShardService

    given = options_of(ShardConfig, args)
    device = given.get("device", ShardConfig.device)
    why = device_unavailable(device)     # fail before loading anything or joining the bus
    if why:
        raise SystemExit(f"llmbus run shard: --device {device}: {why}")
    model = given.pop("model", None) or pull()
    if not model.exists():
        raise SystemExit(f"llmbus run shard: no model file at {model}")
    start, end = args.layers or (None, None)
    if not args.layers and "memory" not in given:
        given["memory"] = available_memory(device)
    return ShardService(config, ShardConfig(model=model, start=start, end=end, **given))
