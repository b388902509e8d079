"""ShardModel: the forward of layers [start, end) over a paged KV cache, for any supported architecture.

The first shard embeds tokens, the last applies the final norm and output head; in between,
hidden states (T, D) float32 go in and out, numpy arrays. The layers themselves run in the runner
services.shard.runner picks for the machine (a GPU shard is services.shard.gpu_model.GpuShardModel,
with this interface).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from kernels.matmul import embed
from kernels.rope import rope_tables
from kernels.sampling import sample
from kernels.xp import to_numpy
from services.modelstore.gguf_config import ModelConfig
from services.modelstore.weights import ShardWeights, check_range
from services.shard.batch import ForwardBatch, validate
from services.shard.kv_cache import PagedKVCache
from services.shard.pooling import pool_rows as pool_rows_of
from services.shard.runner import choose_runner

Trace = Callable[[str, object], None]


class ShardModel:
    sampler = staticmethod(sample)          # the last shard's, for logits where forward leaves them

    def __init__(self, config: ModelConfig, weights: ShardWeights, kv: PagedKVCache, xp=np,
                 trace: Trace | None = None):
        check_range(config, weights.start, weights.end)
        n = weights.end - weights.start
        if kv.k.shape[:1] + kv.k.shape[3:] != (n, config.n_kv_heads, config.head_dim):
            raise ValueError(f"KV cache shape {kv.k.shape} does not fit layers "
                             f"[{weights.start}, {weights.end}) of this model")
        self.config, self.kv, self.xp, self.trace = config, kv, xp, trace
        self.start, self.end = weights.start, weights.end
        self.first, self.last = self.start == 0, self.end == config.n_layers
        # Plain ndarray views: np.memmap (a warm cache load) as a subclass slows every op down.
        w = {k: (a.view(np.ndarray) if isinstance(a, np.memmap) else a) for k, a in weights.arrays().items()}
        self.dtype = np.dtype(w["wqkv"].dtype)              # float32 too for GGUF blocks (QStack)
        if kv.dtype != np.float16:
            raise ValueError(f"a KV cache holds float16, not {kv.dtype}")
        layers = [tuple(w[k][i] for k in ("attn_norm", "wqkv", "wo", "ffn_norm", "w_gate_up", "w_down"))
                  for i in range(n)]     # matrices (out, in), float or QMatrix: see kernels.matmul
        extras = [{k: w[k][i] for k in ShardWeights.LAYER_EXTRAS if k in w} for i in range(n)]
        # RoPE per layer: (base, scaling) as the model says; layers sharing one share their tables.
        self.ropes = [config.rope(self.start + i) for i in range(n)]
        # Its distinct ones and each layer's index among them, found once: hashing a RopeScaling
        # per layer per step cost ~0.1 ms a decoded token.
        self.rope_keys = list(dict.fromkeys(self.ropes))
        self.rope_of_layer = [self.rope_keys.index(r) for r in self.ropes]
        self.embed_scale = self.dtype.type(np.sqrt(config.d_model)) if config.spec.embed_scale_sqrt_d else None
        self.token_embd, self.output_norm, self.output = w.get("token_embd"), w.get("output_norm"), w.get("output")
        if (self.first and self.token_embd is None) or (self.last and self.output is None):
            raise ValueError("weights lack the embeddings or output head their range needs")
        self.runner = choose_runner(xp, config, layers, kv, self.start, extras, self.dtype)

    def forward(self, batch: ForwardBatch, on_device: bool = False) -> np.ndarray:
        """Run the batch; returns logits (S_sample, vocab) float32 on the last shard (on xp with
        on_device, else on the host), else hidden (T, D) float32."""
        return self._forward(batch, on_device)

    def forward_pooled(self, batch: ForwardBatch, pool_rows, pool_kinds,
                       on_device: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The last shard's forward that also pools: logits as `forward` gives them, and per
        sequence of `pool_rows` its rows after the final norm pooled by its kind ("sum", "last",
        "first"), float32 (len(pool_rows), D) on the host: what an embedding is made of."""
        if not self.last:
            raise ValueError("only the last shard pools: it holds the final norm")
        pooled: list[np.ndarray] = []
        logits = self._forward(batch, on_device, lambda h: pooled.append(pool_rows_of(
            self.xp, h, batch.cu_lens(), pool_rows, pool_kinds, self.output_norm,
            self.config.norm_eps)))
        return logits, pooled[0]

    def _forward(self, batch: ForwardBatch, on_device: bool, pool=None):
        c, xp = self.config, self.xp
        fast = getattr(self.runner, "decode_plan", None)        # decode steps checked and planned in C
        plan = None if fast is None else fast(batch, self.first, c.vocab_size, c.d_model)
        in_c = plan is not None
        if not in_c:
            validate(batch, first=self.first, d_model=c.d_model, vocab_size=c.vocab_size,
                     num_pages=self.kv.num_pages, page_size=self.kv.page_size)
            self.kv.check_written(batch)
            plan = self.runner.plan(batch)
        tables = [rope_tables(xp, batch.positions, c.rope_dims, r[0], self.dtype, r[1]) for r in self.rope_keys]
        rope = [tables[i] for i in self.rope_of_layer]                     # per layer: cos, sin (T, n_rot/2)
        if self.first:
            h = embed(xp, self.token_embd, batch.tokens)                   # (T, D), a fresh copy
            if self.embed_scale is not None:
                h *= self.embed_scale
        else:
            h = xp.array(batch.hidden, dtype=self.dtype)                   # copy: h is updated in place
        self._trace("embed" if self.first else "hidden_in", h)
        h = self.runner.run(h, plan, rope, self.trace)                     # (T, D)
        if in_c:
            self.runner.mark_written(plan)
        else:
            self.kv.mark_written(batch)
        if not self.last:
            return self.runner.hidden_out(h)
        if pool is not None:
            pool(h)
        every_row = batch.want_logits is None and batch.num_tokens == batch.num_seqs   # decodes: no gather
        rows = h if every_row else h[xp.asarray(batch.logit_rows())]
        if rows.shape[0] == 0:   # embeddings only: nothing samples
            return xp.zeros((0, c.vocab_size), np.float32) if on_device else \
                np.zeros((0, c.vocab_size), np.float32)
        logits = self.runner.head(rows, self.output_norm, self.output, c.norm_eps)   # (S_sample, V)
        if c.final_softcap:
            cap = logits.dtype.type(c.final_softcap)
            logits = xp.tanh(logits / cap) * cap
        self._trace("logits", logits)
        return logits if on_device else to_numpy(logits).astype(np.float32, copy=False)

    def _trace(self, name: str, a) -> None:
        if self.trace is not None:
            self.trace(name, a)
