"""Every tiny architecture in every K-quant mix, cut in thirds across 3 `llmbus run shard`
processes on the bus, teacher-forced against llama.cpp's logits on the same GGUF
(tests/data/arch-kquant.llamacpp.json) with the bounds of test_arch_kquant_parity.py: activations
cross two real hops in the default cluster's codec, and the logits come back from the last shard
over the wire (Forward.return_logits)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import numpy as np
import pytest
from services.health.processes import child_env
from services.health.forked import ForkServer
from services.shard.service import weight_format
from tests.bus.procs import env, unique_cluster
from tests.engine.arch_gguf import KSPECS, VOCAB
from tests.modelstore.kquant_gguf import MIXES
from tests.modelstore.kquant_run import parity
from tests.shard.driver import Driver, client, shards_ready
from tests.waiting import until_sync

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CODEC = "fp16"          # what `llmbus up` and `llmbus run shard` send between shards unless told
PAGE, PAGES = 16, 4     # 40 reference tokens: 3 pages of one sequence


@pytest.fixture(scope="module")
def forks(tmp_path_factory):
    """The warm fork server `llmbus up` respawns from: each shard process skips the ~1 s of
    imports (several on a loaded machine) a new interpreter takes. Its children write their
    weight caches to a directory of this module's, not the user's."""
    cache = tmp_path_factory.mktemp("shard-weights")
    server = ForkServer(dict(child_env(), **env(), LLMBUS_CACHE=str(cache)))
    until_sync(lambda: server.ready or server.error, 120, what="the fork server warm")
    assert server.ready, server.error
    yield server
    server.close()


def thirds(n_layers: int) -> list[tuple[int, int]]:
    """The ranges of the in-process 3-shard test: cut at n // 3 and 2n // 3."""
    edges = (0, n_layers // 3, 2 * n_layers // 3, n_layers)
    return list(zip(edges, edges[1:]))


@contextlib.asynccontextmanager
async def pipelines(forks: ForkServer, files: dict[str, Path], n_layers: int, logs: Path):
    """Three shard processes per file, all started at once on a cluster of their own; yields a
    Driver per file once every shard is ready."""
    cluster, names, procs = unique_cluster(), {}, []
    for key, path in files.items():
        names[key] = [f"{key}-{a}" for a, _ in thirds(n_layers)]
        for name, (a, b) in zip(names[key], thirds(n_layers)):
            procs.append(forks.spawn(["run", "shard", "--name", name, "--cluster", cluster,
                                      "--interface", "127.0.0.1", "--model", str(path),
                                      "--layers", f"{a}:{b}", "--codec", CODEC, "--threads", "1",
                                      "--pages", str(PAGES), "--page-size", str(PAGE)],
                                     logs / f"{name}.log"))
    try:
        async with client(cluster) as me:
            try:
                await shards_ready(me.directory, [n for ns in names.values() for n in ns], timeout=180)
            except AssertionError as e:
                tails = {p.name: p.read_text()[-1500:] for p in logs.glob("*.log")}
                raise AssertionError(f"{e}\n" + "\n".join(f"--- {k}\n{v}" for k, v in tails.items())) from None
            yield {key: await Driver(me, ns, PAGE).reached() for key, ns in names.items()}
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(30)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(KSPECS))
async def test_three_shard_processes_follow_llama_cpp_in_every_mix(name, built, arch_reference, forks, tmp_path):
    # One test per architecture, its four mixes' pipelines (12 processes) started and driven at
    # once: the forks' start-up and the bus round trips of one overlap the others' work.
    n_layers = KSPECS[name].n_layers
    files = {mix.replace("_", ""): built(name, mix) for mix in MIXES}
    tokens = arch_reference["tokens"]
    async with pipelines(forks, files, n_layers, tmp_path) as drivers:
        for drive in drivers.values():
            # (wait_for: an entry whose heartbeat came late on a loaded machine is waited for, not None)
            infos = [(await drive.directory.wait_for(n, 30)).info for n in drive.names]
            assert [i.layers for i in infos] == [tuple(r) for r in thirds(n_layers)]
            assert {(i.codec, i.weights) for i in infos} == {(CODEC, weight_format("cpu", "auto"))}
        replies = await asyncio.gather(*(d.token_by_token(tokens) for d in drivers.values()))
    failed = []
    for mix, steps, drive in zip(MIXES, replies, drivers.values()):
        logits = np.stack([r.logits.array()[0] for r in steps])      # (positions, vocab)
        assert logits.dtype == np.float32 and logits.shape == (len(tokens), VOCAB)
        # Every step ran in all three processes, its activations crossing both hops in fp16:
        # one token's hidden state, 2 bytes a value.
        assert all([h.shard for h in r.hops] == drive.names for r in steps)
        assert {h.bytes for r in steps for h in r.hops[1:]} == {KSPECS[name].d_model * 2}
        got = parity(logits, arch_reference["files"][f"{name}/{mix}"]["top5"])
        print(f"\n{name} {mix} 3 shard processes ({CODEC} hops) vs llama.cpp: {got}")
        if not (got.sure >= 5 and got.holds()):
            failed.append(f"{mix}: {got}")
    assert not failed, f"{name}: " + "; ".join(failed)
