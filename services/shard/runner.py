"""Which layer loop a CPU shard runs on this machine, decided in one place (a GPU shard's forward is
services.shard.gpu_model.GpuShardModel: its graphs and kernels, not a layer loop of array ops).

    numpy, float32, C library      -> NativeLayers: fused C ops, every row attending alone
    numpy, float32, no C library   -> NumpyLayers: op by op, OpenBLAS small-matrix calls
    numpy, another dtype           -> ArrayLayers on numpy (tests and tools only)
"""

from __future__ import annotations

import numpy as np

from kernels.native_lib import load
from services.shard.array_layers import ArrayLayers
from services.shard.native_layers import NativeLayers
from services.shard.numpy_layers import NumpyLayers


def choose_runner(xp, config, layers, kv, start: int, extras=None, dtype=np.float32):
    """The layer runner for `layers` of a shard starting at layer `start`, over the cache `kv`,
    computing in `dtype` (its weights'); `extras` per layer: the weights the architecture adds
    (ShardWeights.LAYER_EXTRAS)."""
    if xp is not np:
        raise ValueError("ShardModel runs on numpy; a GPU shard is services.shard.gpu_model.GpuShardModel")
    if np.dtype(dtype) != np.float32:
        return ArrayLayers(np, config, layers, kv, start, split=True, extras=extras, dtype=dtype)
    lib = load()
    if lib is None:
        return NumpyLayers(config, layers, kv, start, extras=extras)
    return NativeLayers(lib, config, layers, kv, start, extras=extras)
