"""`llmbus run shard --device`: cpu by default; cuda fails at start with its cause on a host
without cupy or a GPU, and where there is one, a two-shard cuda pipeline follows the CPU model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kernels.xp import ArrayModuleUnavailable, get_xp
from services.shard.service import ShardConfig

from ..bus.procs import ROOT, cli, env


def _cuda_reason() -> str | None:
    """Why cupy cannot run here, or None when it can."""
    try:
        get_xp("cupy")
    except ArrayModuleUnavailable as e:
        return str(e)
    return None


def test_unknown_device_is_refused_by_the_cli_and_the_config(tmp_path):
    r = subprocess.run(cli("run", "shard", "--layers", "0:10", "--device", "tpu"),
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--device" in r.stderr and "tpu" in r.stderr
    with pytest.raises(ValueError, match="device 'tpu'"):
        ShardConfig(model=tmp_path / "m.gguf", start=0, end=10, device="tpu")
    assert ShardConfig(model=tmp_path / "m.gguf", start=0, end=10).device == "cpu"


def test_weight_formats(tmp_path):
    from kernels.q4_0_tiles import wants_tiles
    from kernels.qmatmul import available, library
    from services.shard.service import weight_format
    with pytest.raises(ValueError, match="weights 'int4'"):
        ShardConfig(model=tmp_path / "m.gguf", start=0, end=10, weights="int4")
    blocks = "quantized_t16" if wants_tiles(library()) else "quantized"    # Q4_0 in tiles on AVX-512
    assert weight_format("cpu", "auto") == (blocks if available() else "float32")
    assert weight_format("cpu", "quantized") == blocks
    assert weight_format("cpu", "float32") == "float32"
    assert weight_format("cuda", "auto") == weight_format("cuda", "quantized") == "quantized"   # blocks on the GPU
    assert weight_format("cuda", "float32") == "float32"        # dequantized, then float16 on the device
    r = subprocess.run(cli("run", "shard", "--layers", "0:10", "--weights", "int4"),
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--weights" in r.stderr


@pytest.mark.skipif(_cuda_reason() is None, reason="this host has cupy and a CUDA device")
def test_cuda_without_cupy_or_gpu_exits_at_start_naming_the_cause(tmp_path):
    # No model is read and no socket bound: the check comes before both.
    r = subprocess.run(cli("run", "shard", "--layers", "0:10", "--device", "cuda", "--no-discover",
                           "--model", str(tmp_path / "absent.gguf")),
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--device cuda" in r.stderr and _cuda_reason() in r.stderr
    assert "Traceback" not in r.stderr


# ---------------------------------------------------------------------- with a GPU only

REFERENCE = json.loads((Path(__file__).parents[1] / "data" / "smollm2-135m-q4_1.llamacpp.json").read_text())


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(_cuda_reason() is not None, reason=f"no cuda: {_cuda_reason()}")
@pytest.mark.asyncio
async def test_two_cuda_shard_processes_follow_the_cpu_model(model_path):
    from ..bus.procs import Procs, unique_cluster
    from tests.engine.test_gpu import GPU_MAX_VS_CPU
    from .driver import Driver, client, shards_ready
    from .test_shard_processes import PAGE, PAGES, local_logits
    from services.modelstore.weight_cache import load_weights
    from services.shard.kv_cache import KVConfig, PagedKVCache
    from services.shard.model import ShardModel

    loaded = load_weights(model_path, 0, 30)
    cpu = ShardModel(loaded.config, loaded.weights,
                     PagedKVCache.for_model(loaded.config, 0, 30, KVConfig(PAGES, PAGE)))
    names = ["shard-0", "shard-15"]
    procs, cluster = Procs(), unique_cluster()
    try:
        for name, (a, b) in zip(names, ((0, 15), (15, 30))):
            procs.start(cli("run", "shard", "--name", name, "--cluster", cluster,
                            "--interface", "127.0.0.1", "--model", str(model_path),
                            "--layers", f"{a}:{b}", "--codec", "fp16", "--device", "cuda",
                            "--pages", str(PAGES), "--page-size", str(PAGE)))
        async with client(cluster) as me:
            ready = await shards_ready(me.directory, names, procs=procs)
            assert {e.info.device for e in ready} == {"cuda"}
            assert {e.info.weights for e in ready} == {"quantized"}       # GGUF blocks on the GPU
            drive = await Driver(me, names, PAGE).reached()
            agree = total = 0
            for chat in REFERENCE["chats"][:2]:
                replies = await drive.teacher_forced(chat, steps=8)
                expected = local_logits(cpu, chat, steps=8)
                for r, want, top in zip(replies, expected, chat["greedy_steps_top5"]):
                    got = r.logits.array()[0]
                    assert got.dtype == np.float32 and np.isfinite(got).all()
                    # fp16 activations between the shards and a float16 KV cache: the README's bound
                    # against the CPU's float32 forward
                    np.testing.assert_allclose(got, want, rtol=0, atol=GPU_MAX_VS_CPU)
                    if top[0][1] - top[1][1] >= 1.0:
                        total += 1
                        agree += int(r.tokens.array()[0] == np.argmax(want))
            assert total and agree == total
    finally:
        procs.stop_all()
