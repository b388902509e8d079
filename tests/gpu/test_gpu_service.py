"""A shard service with --device cuda, as a running service on the bus (the stand-in's device in CI,
the GPU where there is one): its range loaded as GGUF blocks on the device, the last shard's
sampling done on the device's logits, its answer the CPU shard's."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

import wire
from bus.config import BusConfig, ServiceConfig
from services.shard import gpu_model
from services.shard.service import ShardConfig, ShardService
from tests.engine.tiny_gguf import TINY, write_tiny_llama
from wire.messages.sampling import SamplingParams
from wire.messages.shard import Forward, RouteStage

from services.scheduler.pipelines.answers import PipelineClient

from ..bus.procs import free_port
from ..bus.serving import running

PAGE = 16


def forward(s: ShardService, batch_id: int, seqs: list[tuple[list[int], int, int]], **kw) -> Forward:
    """One batch of (ids, start, first page) per sequence, each sampling greedily with 3 alternatives."""
    return Forward(batch_id=batch_id, first_layer=0,
                   positions=[p for ids, start, _ in seqs for p in range(start, start + len(ids))],
                   query_lens=[len(ids) for ids, _, _ in seqs],
                   page_table=[list(range(page, page + (start + len(ids) + PAGE - 1) // PAGE))
                               for ids, start, page in seqs],
                   tokens=wire.Tensor(np.asarray([t for ids, _, _ in seqs for t in ids], np.int32)),
                   sampling=[SamplingParams(temperature=0.0, top_logprobs=3)] * len(seqs), steps=[0] * len(seqs),
                   route=[RouteStage(s.name, s.epoch)], return_logits=True, **kw)


async def answers(model, device: str) -> list:
    ports = free_port(), free_port()        # the shard's, and this test's (its answers come here)
    bus = BusConfig(mdns=False, peers=tuple(f"127.0.0.1:{p}" for p in ports))
    shard = ShardService(ServiceConfig(name=f"gpu-{device}", kind="shard", bus=bus, rpc_port=ports[0],
                                       discover=True),
                         ShardConfig(model=model, start=0, end=TINY["n_layers"], num_pages=16, device=device,
                                     weights="auto" if device == "cuda" else "float32"))
    me = PipelineClient(ServiceConfig(name=f"gpu-{device}-test", kind="client", bus=bus, rpc_port=ports[1],
                                      discover=True))
    out = []
    async with running(shard) as s, running(me):
        await me.reached_by(s.name)
        if device == "cuda":
            assert s.info().device == "cuda" and s.info().weights == "quantized" and s.info().gpu_mb > 0
        out.append(await me.answers.forward(s.name, forward(s, 1, [([5, 17, 99, 3], 0, 0), ([42, 7], 0, 4)]), 60))
        out.append(await me.answers.forward(s.name, forward(s, 2, [([8], 4, 0), ([9], 2, 4)]), 60))
    return out


async def test_a_cuda_shard_answers_as_the_cpu_shards_float32_forward(dev, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_model, "gpu_device", lambda: dev)
    monkeypatch.setenv("LLMBUS_CACHE", str(tmp_path / "cache"))
    model = write_tiny_llama(tmp_path / "tiny.gguf", qtype=QT.Q8_0, seed=5)
    gpu, cpu = await answers(model, "cuda"), await answers(model, "cpu")
    for g, c in zip(gpu, cpu):
        got, want = g.logits.array(), c.logits.array()
        assert got.shape == want.shape == (2, TINY["vocab"])
        np.testing.assert_allclose(got, want, atol=5e-3 * np.abs(want).max())
        np.testing.assert_array_equal(g.tokens.array(), got.argmax(1))         # sampled from these logits
        np.testing.assert_array_equal(g.top_ids.array(), np.argsort(-got, 1, kind="stable")[:, :3])
        lse = np.log(np.exp(got - got.max(1, keepdims=True)).sum(1)) + got.max(1)
        np.testing.assert_allclose(g.logprobs.array(), got.max(1) - lse, atol=1e-5)
