"""GpuShardModel, the whole GPU forward, on each device: against the CPU's float32 forward, a graph
replay against the same step run eagerly, mixed and long batches, a chain of shards, and the
guarantees a step relies on (one upload, padding rows write no KV, bad batches refused first)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from kernels.gpu.device import NumpyDevice
from services.modelstore.weight_cache import load_weights
from services.shard.batch import BadBatch, ForwardBatch
from services.shard.gpu_model import BUCKETS, GpuShardModel
from services.shard.inprocess import Chunk, PageAllocator, Pipeline, build_batch
from services.shard.kv_cache import KVConfig, KVMissing, PagedKVCache
from services.shard.model import ShardModel
from tests.engine.tiny_gguf import TINY, write_tiny_llama

N = TINY["n_layers"]
PAGES, PAGE = 80, 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """qtype -> (GGUF path, weights cache folder)."""
    root = tmp_path_factory.mktemp("gpu-tiny")
    files = {}

    def get(qtype):
        if qtype not in files:
            files[qtype] = write_tiny_llama(root / f"{qtype.name}.gguf", qtype=qtype, seed=3)
        return files[qtype], root
    return get


def gpu_model(dev, path, root, start=0, end=N, graphs=True, pages=PAGES):
    q = load_weights(path, 0, N, "quantized", root=root)
    from tests.modelstore.kquant_run import sub_range
    return GpuShardModel(q.config, sub_range(q.weights, start, end, N), KVConfig(pages, PAGE), dev, graphs=graphs)


def cpu_model(path, root):
    f = load_weights(path, 0, N, "float32", root=root)
    return ShardModel(f.config, f.weights, PagedKVCache.for_model(f.config, 0, N, KVConfig(PAGES, PAGE)))


STEPS = [[Chunk("a", list(range(3, 12)), 0)],                                 # a prompt
         [Chunk("a", [40], 9), Chunk("b", [5, 6, 7], 0)],                     # a decode beside a prompt
         [Chunk("a", [41], 10), Chunk("b", [8], 3), Chunk("c", [1], 0)],
         [Chunk("a", [42], 11), Chunk("b", [9], 4), Chunk("c", [2], 1)],
         [Chunk("c", list(range(20, 50)), 2)]]


def run(forward, steps=STEPS, pages=PAGES):
    alloc = PageAllocator(pages, PAGE)
    return [forward(build_batch(chunks, alloc)) for chunks in steps]


def replays(model) -> list[int]:
    """The buckets whose graphs `model` replays from now on, in order (filled in as it runs)."""
    seen = []
    for b, graph in model.graphs.items():
        graph.replay = lambda real=graph.replay, b=b: (seen.append(b), real())[1]
    return seen


def same(dev, got, want):
    """Within float32 rounding of the same sums: a step's rows may go through another product
    kernel in a graph than eagerly (the head of a 16-row graph multiplies 16 rows, an eager step's
    one logits row has the one-row kernel, which sums in its own order: 2.4e-7 apart on an H100),
    and on numpy BLAS may sum a row differently in a batch of another size."""
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4 if dev.name == "cuda" else 1e-6, atol=1e-6)


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q4_1, QT.Q8_0, QT.F16, QT.F32])
def test_follows_the_cpus_float32_forward(dev, tiny, qtype):
    path, root = tiny(qtype)
    got = run(gpu_model(dev, path, root).forward)
    want = run(cpu_model(path, root).forward)
    for g, w in zip(got, want):
        assert g.dtype == np.float32 and isinstance(g, np.ndarray)
        # Weights alike; the GPU keeps K and V in float16 (the CPU in float32) and sums in its own order.
        np.testing.assert_allclose(g, w, rtol=0, atol=5e-3 * np.abs(w).max())
        assert (g.argmax(1) == w.argmax(1)).all()


def test_a_graph_replay_gives_the_eager_steps_results(dev, tiny):
    path, root = tiny(QT.Q4_1)
    graphed, eager = gpu_model(dev, path, root), gpu_model(dev, path, root, graphs=False)
    assert sorted(graphed.graphs) == list(BUCKETS) and not eager.graphs
    replayed = replays(graphed)
    same(dev, run(graphed.forward), run(eager.forward))
    assert replayed == [16, 4, 4, 4, 32]             # every step a graph's: 9, 4, 3, 3 and 30 tokens


def test_rows_of_a_mixed_batch_are_the_rows_alone(dev, tiny):
    path, root = tiny(QT.Q8_0)
    together = run(gpu_model(dev, path, root).forward)[1]              # "a" decodes beside "b"'s prompt
    alone_model = gpu_model(dev, path, root)
    alloc = PageAllocator(PAGES, PAGE)
    alone_model.forward(build_batch(STEPS[0], alloc))
    a = alone_model.forward(build_batch([Chunk("a", [40], 9)], alloc))
    b = alone_model.forward(build_batch([Chunk("b", [5, 6, 7], 0)], alloc))
    np.testing.assert_allclose(together, np.concatenate([a, b]), rtol=1e-5, atol=1e-5)


def test_a_prompt_past_the_graphs_runs_eagerly_with_cublas(dev, tiny):
    path, root = tiny(QT.Q4_0)
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, TINY["vocab"], 200)]
    whole = gpu_model(dev, path, root)
    one = whole.forward(build_batch([Chunk("p", tokens, 0)], PageAllocator(PAGES, PAGE)))
    chunked = gpu_model(dev, path, root)
    alloc = PageAllocator(PAGES, PAGE)
    chunked.forward(build_batch([Chunk("p", tokens[:100], 0)], alloc))
    two = chunked.forward(build_batch([Chunk("p", tokens[100:], 100)], alloc))
    # Chunked, BLAS sums q, k and v in another order: their last bits move, and now and then a value
    # rounds to the neighbouring float16 (the cache's, and q's for the scores): 2e-4 here, on numpy.
    np.testing.assert_allclose(one, two, rtol=1e-3, atol=1e-3)


def test_a_sequence_wider_than_the_graphs_page_tables_runs_eagerly(dev, tiny):
    path, root = tiny(QT.Q8_0)
    graphed, eager = gpu_model(dev, path, root), gpu_model(dev, path, root, graphs=False)
    assert graphed.width == 256 // PAGE                        # the tiny model's context, in pages
    long = [[Chunk("l", list(range(1, 61)) * 5, 0)], [Chunk("l", [7], 300)], [Chunk("l", [8], 301)]]
    replayed = replays(graphed)
    same(dev, run(graphed.forward, long), run(eager.forward, long))
    assert replayed == []


def test_a_chain_of_shards_gives_one_shards_logits(dev, tiny):
    path, root = tiny(QT.Q4_1)
    one = run(gpu_model(dev, path, root).forward)
    chain = Pipeline([gpu_model(dev, path, root, 0, 1), gpu_model(dev, path, root, 1, 2),
                      gpu_model(dev, path, root, 2, N)])
    same(dev, run(chain.forward), one)


def test_padding_rows_write_no_kv(dev, tiny):
    path, root = tiny(QT.Q8_0)
    m = gpu_model(dev, path, root)
    alloc = PageAllocator(PAGES, PAGE)
    m.forward(build_batch([Chunk(s, [1, 2], 0) for s in "abc"], alloc))
    before = [dev.download(c) for c in (m.kv.k, m.kv.v)]
    m.forward(build_batch([Chunk(s, [3], 2) for s in "abc"], alloc))      # 3 rows in the graph of 4
    after = [dev.download(c) for c in (m.kv.k, m.kv.v)]
    written = {(alloc.owned[s][0], 2) for s in "abc"}                     # (page, slot) of position 2
    for b, a in zip(before, after):
        changed = {(int(p), int(s)) for p, s in zip(*np.nonzero((a != b).any(axis=(0, 3, 4))))}
        assert changed == written


def test_bad_batches_and_missing_kv_are_refused_before_anything_runs(dev, tiny):
    path, root = tiny(QT.Q8_0)
    m = gpu_model(dev, path, root)
    k0 = dev.download(m.kv.k)
    with pytest.raises(BadBatch, match="tokens"):
        m.forward(build_batch([Chunk("a", [TINY["vocab"]], 0)], PageAllocator(PAGES, PAGE)))
    with pytest.raises(KVMissing):
        m.forward(build_batch([Chunk("a", [5], 3)], PageAllocator(PAGES, PAGE)))
    np.testing.assert_array_equal(dev.download(m.kv.k), k0)


class CountingDevice(NumpyDevice):
    def __init__(self):
        super().__init__()
        self.uploads = self.downloads = 0

    def upload(self, dst, host):
        self.uploads += 1
        super().upload(dst, host)

    def download(self, src):
        self.downloads += 1
        return super().download(src)


def test_a_decode_step_is_one_upload_and_one_download(tiny):
    path, root = tiny(QT.Q8_0)
    first, last = gpu_model(CountingDevice(), path, root, 0, 2), gpu_model(CountingDevice(), path, root, 2, N)
    alloc = PageAllocator(PAGES, PAGE)
    batches = [build_batch([Chunk(s, [1, 2], 0) for s in "ab"], alloc),
               build_batch([Chunk(s, [3], 2) for s in "ab"], alloc)]
    for batch in batches:
        for m in (first, last):
            m.dev.uploads = m.dev.downloads = 0
        hidden = first.forward(batch)
        logits = last.forward(ForwardBatch(positions=batch.positions, query_lens=batch.query_lens,
                                           page_table=batch.page_table, hidden=hidden), on_device=True)
        assert (first.dev.uploads, first.dev.downloads) == (1, 1)   # the header; the hidden states back
        assert (last.dev.uploads, last.dev.downloads) == (2, 0)     # header and hidden; logits stay there
        assert logits.shape == (2, TINY["vocab"])
