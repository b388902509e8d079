"""ShardModel: the llama forward of layers [start, end) over a paged KV cache.

The first shard embeds tokens, the last applies the final norm and output head; in between,
hidden states (T, D) float32 go in and out. Inputs and outputs are numpy arrays whatever
array module computes (cupy with fp16 weights on a GPU, numpy float32 on a CPU).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from kernels.attention import attend_decode, attend_prefill, write_kv
from kernels.attention_native import attend_decode_paged
from kernels.ffn import feed_forward
from kernels.matmul import embed, matmul
from kernels.native_lib import load
from kernels.norm import add_rms_norm, rms_norm
from kernels.rope import apply_rope, rope_tables
from kernels.xp import to_numpy
from services.modelstore.gguf_config import ModelConfig
from services.modelstore.weights import ShardWeights, check_range
from services.shard.batch import ForwardBatch, validate
from services.shard.kv_cache import PagedKVCache
from services.shard.native_layers import NativeLayers
from services.shard.plan import AttentionPlan, plan_attention

Trace = Callable[[str, object], None]


class ShardModel:
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
        if kv.dtype != self.dtype:
            raise ValueError(f"KV cache dtype {kv.dtype} differs from weights dtype {self.dtype}")
        self.layers = [tuple(w[k][i] for k in ("attn_norm", "wqkv", "wo", "ffn_norm", "w_gate_up", "w_down"))
                       for i in range(n)]     # matrices (out, in), float or QMatrix: see kernels.matmul
        self.token_embd, self.output_norm, self.output = w.get("token_embd"), w.get("output_norm"), w.get("output")
        if (self.first and self.token_embd is None) or (self.last and self.output is None):
            raise ValueError("weights lack the embeddings or output head their range needs")
        self.split = xp is np           # OpenBLAS's small-matrix path (kernels.matmul); cuBLAS needs no help
        # Decodes read the KV pages in place (kernels.attention_native) on a CPU instead of gathering
        # them: at batch 16 the gather copies were most of a step outside the matmuls.
        self.paged_decode = xp is np and self.dtype == np.float32
        self.scale = self.dtype.type(1.0 / np.sqrt(config.head_dim))
        # With the C library, a CPU float32 shard runs its layers through fused ops (bit-identical).
        lib = load() if self.paged_decode else None
        # With it, every query row attends alone, prompt rows too (plan_attention's rows_alone): the
        # quantized kernels round activations to 8 bits, which turns a 1-ulp difference between
        # a prompt's chunkings into a different token, so no row may depend on its neighbours.
        self.rows_alone = lib is not None
        self.native = None if lib is None else NativeLayers(lib, config, self.layers, kv, self.scale, self.split,
                                                             self.start)

    def forward(self, batch: ForwardBatch) -> np.ndarray:
        """Run the batch; returns logits (S_sample, vocab) float32 on the last shard, else hidden (T, D) float32."""
        c, xp = self.config, self.xp
        validate(batch, first=self.first, d_model=c.d_model, vocab_size=c.vocab_size,
                 num_pages=self.kv.num_pages, page_size=self.kv.page_size)
        self.kv.check_written(batch)
        plan = plan_attention(batch, self.kv.page_size, self.dtype, xp, bias=not self.paged_decode,
                              rows_alone=self.rows_alone)
        cos, sin = rope_tables(xp, batch.positions, c.rope_dims, c.rope_base, self.dtype)
        if self.first:
            h = embed(xp, self.token_embd, batch.tokens)                   # (T, D), a fresh copy
        else:
            h = xp.array(batch.hidden, dtype=self.dtype)                   # copy: h is updated in place
        self._trace("embed" if self.first else "hidden_in", h)
        if self.native is not None:
            h = self.native.run(h, plan, cos, sin, self.trace)           # its buffer: copied below
            self.kv.mark_written(batch)
            if not self.last:
                return h.copy()
        else:
            for i, layer in enumerate(self.layers):
                h = self._layer(i, layer, h, plan, cos, sin)
        self.kv.mark_written(batch)
        if not self.last:
            return to_numpy(h).astype(np.float32, copy=False)
        every_row = batch.want_logits is None and batch.num_tokens == batch.num_seqs   # decodes: no gather
        rows = h if every_row else h[xp.asarray(batch.logit_rows())]
        if self.native is not None:
            x = add_rms_norm(np.ascontiguousarray(rows), None, self.output_norm, c.norm_eps)   # the same, in C
        else:
            x = rms_norm(xp, rows, self.output_norm, c.norm_eps)
        logits = matmul(xp, x, self.output, self.split)                  # (S_sample, V)
        self._trace("logits", logits)
        return to_numpy(logits).astype(np.float32, copy=False)

    def _layer(self, i: int, layer, h, plan: AttentionPlan, cos, sin):
        c, xp = self.config, self.xp
        attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down = layer
        t = h.shape[0]
        nq, nkv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        x = rms_norm(xp, h, attn_norm, c.norm_eps)
        qkv = matmul(xp, x, wqkv, self.split)                             # (T, (H + 2 KVH) * Dh)
        q = apply_rope(xp, qkv[:, :nq].reshape(t, c.n_heads, c.head_dim), cos, sin)
        k = apply_rope(xp, qkv[:, nq:nq + nkv].reshape(t, c.n_kv_heads, c.head_dim), cos, sin)
        v = qkv[:, nq + nkv:].reshape(t, c.n_kv_heads, c.head_dim)
        kc, vc = self.kv.k[i], self.kv.v[i]
        write_kv(kc, vc, k, v, plan.write_pages, plan.write_slots)
        attn = xp.empty_like(q)                                           # (T, H, Dh)
        if plan.decode_rows.shape[0] and self.paged_decode:
            attn[plan.decode_rows] = attend_decode_paged(q[plan.decode_rows], kc, vc, plan.decode_table,
                                                         plan.decode_lens, self.scale)
        elif plan.decode_rows.shape[0]:
            attn[plan.decode_rows] = attend_decode(xp, q[plan.decode_rows], kc, vc, plan.decode_table,
                                                   plan.decode_bias, self.scale)
        for p in plan.prefills:
            attn[p.rows] = attend_prefill(xp, q[p.rows], kc, vc, p.pages, p.start, self.scale)
        h += matmul(xp, attn.reshape(t, nq), wo, self.split)              # (T, D)
        self._trace("attn", attn)
        h += feed_forward(xp, rms_norm(xp, h, ffn_norm, c.norm_eps), w_gate_up, w_down, self.split)
        self._trace("h", h)
        return h

    def _trace(self, name: str, a) -> None:
        if self.trace is not None:
            self.trace(name, a)
