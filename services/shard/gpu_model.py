"""GpuShardModel: the forward of layers [start, end) on a device (kernels.gpu.device), with
ShardModel's interface: a ForwardBatch in, host hidden states out, or the last shard's logits,
which can stay on the device for its sampler (`forward(batch, on_device=True)`, `sampler`).

A step of at most 128 tokens replays the CUDA graph captured at load for the smallest bucket
(1, 2, 4, ... 128 rows) that holds it: its header (tokens, positions, KV slots, page tables:
services/shard/gpu_plan.py) goes into the graph's buffers in one copy first, and nothing else
crosses to the device. Longer prompt chunks run the same launches eagerly, their products by
cuBLAS. With numpy standing in for the device (kernels.gpu.device.NumpyDevice) every line of this
runs the same, kernels replaced by their references.
"""

from __future__ import annotations

import numpy as np

from kernels.gpu.device import CupyDevice
from kernels.gpu.sampling import DeviceSampler
from services.modelstore.gguf_config import ModelConfig
from services.modelstore.weights import ShardWeights, check_range
from services.shard.batch import ForwardBatch, validate
from services.shard.gpu_layers import GpuLayers, Workspace
from services.shard.gpu_plan import Layout, padding, pages_needed, stage
from services.shard.gpu_weights import upload_weights
from services.shard.kv_cache import KVConfig, PagedKVCache
from services.shard.pooling import pool_rows as pool_rows_of

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
F32 = np.float32


def gpu_device() -> CupyDevice:
    """The CUDA device a `--device cuda` shard runs on; ArrayModuleUnavailable naming why there is none."""
    return CupyDevice()


def bucket(tokens: int) -> int | None:
    """The graph a step of `tokens` tokens replays: the smallest bucket holding them, or None."""
    return next((b for b in BUCKETS if b >= tokens), None)


class GpuShardModel:
    def __init__(self, config: ModelConfig, weights: ShardWeights, kv: KVConfig, dev, graphs: bool = True):
        check_range(config, weights.start, weights.end)
        if kv.num_pages * kv.page_size >= 2**31:
            raise ValueError(f"{kv.num_pages} pages of {kv.page_size}: KV slots are int32 on the device")
        self.config, self.dev, self.xp = config, dev, dev.xp
        self.start, self.end = weights.start, weights.end
        self.first, self.last = self.start == 0, self.end == config.n_layers
        if (self.first and weights.token_embd is None) or (self.last and weights.output is None):
            raise ValueError("weights lack the embeddings or output head their range needs")
        self.dtype = np.dtype(np.float16)                      # of the KV cache; hidden states are float32
        with dev.activate():
            self.kv = PagedKVCache.for_model(config, self.start, self.end, kv, dtype=np.float16, xp=dev.xp)
            self.weights = upload_weights(dev, weights, config.qkv_dim, config.head_dim)
            self.layers = GpuLayers(dev, config, self.weights, self.kv, self.start, self.first, self.last)
            # A graph's page tables are this wide: a sequence of the model's whole context.
            self.width = min(kv.num_pages, -(-config.context_length // kv.page_size))
            top = BUCKETS[-1]
            self.decode_ws = Workspace(dev, config, top, top, self.width, top if self.last else 0)
        self._eager_ws: Workspace | None = None
        self._ws: Workspace | None = None                      # the last forward's
        # The final norm's weights on the host: embeddings pool the rows there (forward_pooled).
        self._output_norm = np.asarray(weights.output_norm, F32) if self.last else None
        self._hidden = np.zeros((top, config.d_model), F32)    # host side of a graphed step's input
        self.graphs: dict[int, object] = {}
        self.sampler = DeviceSampler(dev)
        if graphs:
            self.capture_graphs()

    def capture_graphs(self) -> None:
        """Run each bucket's step once on padding (every kernel loaded, no KV written), then capture
        it: warm-up, before the shard serves."""
        ws, dev = self.decode_ws, self.dev
        with dev.activate():
            for b in BUCKETS:
                lay = Layout(b, b, self.width)
                dev.upload(ws.header[:lay.size], padding(lay))
                self.layers.run(ws, lay, b, b if self.last else 0, eager=False)
            for b in BUCKETS:
                with dev.capture() as graph:
                    self.layers.run(ws, Layout(b, b, self.width), b, b if self.last else 0, eager=False)
                self.graphs[b] = graph
            dev.synchronize()

    def forward(self, batch: ForwardBatch, on_device: bool = False):
        """Run the batch: logits (S_sample, V) float32 on the last shard (left on the device with
        on_device, finished, valid until the next forward), else hidden (T, D) float32 on the host."""
        c, dev = self.config, self.dev
        validate(batch, first=self.first, d_model=c.d_model, vocab_size=c.vocab_size,
                 num_pages=self.kv.num_pages, page_size=self.kv.page_size)
        self.kv.check_written(batch)
        t, s = batch.num_tokens, batch.num_seqs
        n_logits = int(batch.logit_rows().shape[0]) if self.last else 0
        width = pages_needed(batch, self.kv.page_size)
        rows = bucket(t)
        graph = self.graphs.get(rows) if width <= self.width else None
        with dev.activate():
            if graph is not None:
                ws, layout = self.decode_ws, Layout(rows, rows, self.width)
            else:
                rows, layout = t, Layout(t, s, width)
                ws = self._eager_workspace(layout, n_logits)
            header, n = stage(batch, layout, self.kv.page_size, self.first)
            dev.upload(ws.header[:n], header[:n])
            if not self.first:
                self._upload_hidden(ws, batch.hidden, rows)
            if graph is not None:
                graph.replay()
            else:
                self.layers.run(ws, layout, t, n_logits, eager=True)
            self.kv.mark_written(batch)
            self._ws = ws
            if not self.last:
                return dev.download(ws.h[:t])
            logits = ws.logits[:n_logits]
            if not on_device:
                return dev.download(logits)
            dev.synchronize()               # finished: any stream may read them now
            return logits

    def forward_pooled(self, batch: ForwardBatch, pool_rows, pool_kinds, on_device: bool = False):
        """`forward`, and the rows of `pool_rows` pooled as ShardModel.forward_pooled pools them:
        the step's final hidden states come to the host (T x D floats: a prompt chunk's worth)
        and are normed and pooled there."""
        if not self.last:
            raise ValueError("only the last shard pools: it holds the final norm")
        logits = self.forward(batch, on_device)
        h = self.dev.download(self._ws.h[:batch.num_tokens])
        return logits, pool_rows_of(np, h, batch.cu_lens(), pool_rows, pool_kinds,
                                    self._output_norm, self.config.norm_eps)

    def _upload_hidden(self, ws: Workspace, hidden: np.ndarray, rows: int) -> None:
        t = hidden.shape[0]
        if rows == t:
            self.dev.upload(ws.h[:t], hidden)
            return
        self._hidden[:t] = hidden
        self._hidden[t:rows] = 0                               # padding rows: finite, whatever came before
        self.dev.upload(ws.h[:rows], self._hidden[:rows])

    def _eager_workspace(self, layout: Layout, n_logits: int) -> Workspace:
        ws = self._eager_ws
        if ws is None or not (layout.rows <= ws.rows and layout.size <= ws.layout.size
                              and (not self.last or n_logits <= ws.logits.shape[0])):
            self._eager_ws = None                               # its memory back to the pool first
            rows = max(layout.rows, 0 if ws is None else ws.rows)
            width = max(layout.width, 0 if ws is None else ws.layout.width)
            tables = max(layout.table_rows, 0 if ws is None else ws.layout.table_rows)
            logits = max(n_logits, 0 if ws is None or ws.logits is None else ws.logits.shape[0])
            self._eager_ws = ws = Workspace(self.dev, self.config, rows, tables, width,
                                            logits if self.last else 0)
        return ws

    def device_bytes(self) -> int:
        """What this model holds on the device: weights, KV cache and step buffers."""
        ws = self.decode_ws.nbytes + (0 if self._eager_ws is None else self._eager_ws.nbytes)
        return self.weights.nbytes + self.kv.nbytes() + ws + self.layers.scratch_bytes
