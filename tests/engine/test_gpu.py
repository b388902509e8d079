"""The real model on the GPU path (services/shard/gpu_model.py), on each device: numpy standing in
for the GPU (what CI runs), and the GPU itself where cupy finds one. Weights stay in their GGUF
blocks on the device, the KV cache is float16, activations float32."""

import numpy as np
import pytest

from services.modelstore.footprint import read_footprint
from services.shard.gpu_model import GpuShardModel
from services.shard.inprocess import Chunk, PageAllocator, build_batch
from services.shard.kv_cache import KVConfig
from tests.engine.teacher import margins, teacher_forced
from tests.engine.test_parity import FLOAT32_MAX
from tests.gpu.conftest import cuda_device, dev  # noqa: F401  (fixtures: numpy, and the GPU where there is one)

# The README's figures for `--device cuda`: the CPU's float32 bound against llama.cpp's reference,
# and the distance to the CPU's float32 forward (0.023 on the stand-in; a GPU sums in its own order).
GPU_MAX_VS_LLAMA_CPP, GPU_MAX_VS_CPU = FLOAT32_MAX, 0.1
# Device bytes of the weights per byte of the file's tensors (the bound; 1.0 here: blocks as they are).
MAX_WEIGHT_RATIO = 1.1


def test_the_readme_states_these_bounds():
    from tests.engine.test_handoff import readme
    assert (f"top-5 logits within {GPU_MAX_VS_LLAMA_CPP:g} of its reference, as the CPU's float32 forward, "
            f"and {GPU_MAX_VS_CPU:g} of that forward") in readme()


def gguf_bytes(path, start: int, end: int, tied: bool) -> int:
    """The file's tensor bytes for layers [start, end) and the ends they hold (a tied head once)."""
    fp = read_footprint(path)
    ends = (fp.first_bytes if start == 0 else 0) + (fp.last_bytes if end == fp.n_layers else 0)
    if start == 0 and end == fp.n_layers and tied:
        ends -= fp.first_bytes                                # footprint counts it for both ends
    return sum(fp.layer_bytes[start:end]) + ends


@pytest.mark.slow
def test_real_model_on_the_gpu_path_follows_llama_cpp(dev, real_quantized, model_path, reference):
    """The 30 layers teacher-forced through the reference chats: the CPU float32 forward's bounds
    (tests/engine/test_parity.py), and weights on the device at their GGUF bytes."""
    cfg = real_quantized.config
    gpu = GpuShardModel(cfg, real_quantized.weights, KVConfig(64, 16), dev)
    w = real_quantized.weights
    ratio = gpu.weights.nbytes / gguf_bytes(model_path, 0, cfg.n_layers, w.output is w.token_embd)
    diffs = []
    for chat in reference["chats"]:
        logits = teacher_forced(gpu.forward, chat)
        assert isinstance(logits, np.ndarray) and logits.dtype == np.float32
        top5 = chat["greedy_steps_top5"]
        ids = np.array([[t[0] for t in step] for step in top5])
        ref = np.array([[t[1] for t in step] for step in top5])
        sure = margins(chat) >= 1.0
        np.testing.assert_array_equal(logits.argmax(1)[sure], ids[sure, 0])
        d = np.abs(np.take_along_axis(logits, ids, 1) - ref)
        assert d.mean() <= 0.35, d.mean()
        diffs.append(d.ravel())
    d = np.concatenate(diffs)
    print(f"\nthe GPU path on {dev.name} vs llama.cpp: top-5 |diff| mean {d.mean():.3f} max {d.max():.3f}; "
          f"weights {gpu.weights.nbytes / 2**20:.1f} MiB, {ratio:.3f}x the file's")
    assert (d <= 1.0).mean() >= 0.99 and d.max() <= GPU_MAX_VS_LLAMA_CPP + 5e-3
    assert ratio <= MAX_WEIGHT_RATIO


@pytest.mark.slow
def test_shard_service_with_device_cuda_loads_the_blocks_on_the_gpu(dev, model_path, monkeypatch):
    """What `llmbus run shard --device cuda` loads: GGUF blocks and a float16 KV cache on the device
    (the stand-in's in CI), host float32 out, logits sampled where they are."""
    from bus.config import ServiceConfig
    from services.shard import gpu_model
    from services.shard.service import ShardConfig, ShardService

    monkeypatch.setattr(gpu_model, "gpu_device", lambda: dev)
    svc = ShardService(ServiceConfig(name="shard-gpu", kind="shard"),
                       ShardConfig(model=model_path, start=0, end=15, device="cuda", num_pages=16))
    assert svc.weight_format == "quantized"
    model = svc._load(0, 0, 15).model
    assert isinstance(model, GpuShardModel) and model.dev is dev and model.kv.dtype == np.float16
    assert model.weights.nbytes <= MAX_WEIGHT_RATIO * gguf_bytes(model_path, 0, 15, tied=False)
    hidden = model.forward(build_batch([Chunk("a", [1, 2, 3, 4], 0)], PageAllocator(16, 16)))
    assert isinstance(hidden, np.ndarray) and hidden.dtype == np.float32 and hidden.shape == (4, 576)
    assert np.isfinite(hidden).all()
