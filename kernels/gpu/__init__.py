"""The GPU path: CUDA kernels (cuda/*.cu, compiled by NVRTC through cupy at first use), their numpy
references, and a device abstraction under which the same host code drives either.

    device.py      NumpyDevice (the references stand in for the kernels: CI) or CupyDevice (a GPU)
    recorded.py    NumpyDevice's graphs: launches recorded by address, replayed by the references
    kernels.py     every kernel: its CUDA name and source, parameters, launch shape and reference
    ref_quant.py   GGUF blocks read as the CUDA code reads them (quant.cuh), and the products
    ref_ops.py     norms, RoPE with the KV write, attention, gates, the greedy sampler
    matrix.py      a weight matrix on the device, in its GGUF blocks or float16
    ops.py         the launches a forward makes, shapes to grid
    sampling.py    the last shard's sampler with the logits on the device
"""
