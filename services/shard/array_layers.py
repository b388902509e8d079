"""The layer loop written once against an array module, op by op: the definition the other loops
are held to (numpy, any float dtype; tests and tools).

Each projection is one matrix product, decode rows attend over their pages gathered and masked by
a bias, prompt chunks attend as a whole. numpy_layers.py is the CPU float32 variant of this loop;
native_layers.py replaces it where the C library is built; a GPU shard runs its own kernels
(services/shard/gpu_layers.py). What an architecture adds to
the llama layer (biases, q/k norms, post-norms, GELU gate, sliding window) is asked of the
model's description (config.spec) at the step it changes.
"""

from __future__ import annotations

import numpy as np

from kernels.attention import attend_decode, attend_prefill, window_bias, write_kv
from kernels.ffn import feed_forward
from kernels.matmul import matmul
from kernels.norm import rms_norm
from kernels.rope import apply_rope
from kernels.xp import to_numpy
from services.shard.plan import AttentionPlan, plan_attention


class ArrayLayers:
    """Runs the layers `layers` (per layer: attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down) of a
    shard starting at layer `start` on `xp`, over the paged cache `kv` (float16), in `dtype`;
    `extras` (per layer, a dict of ShardWeights.LAYER_EXTRAS) holds what the architecture adds."""

    rows_alone = False      # prompt chunks attend together (plan_attention)
    bias = True             # decode rows are masked by plan.decode_bias

    def __init__(self, xp, config, layers, kv, start: int, split: bool = False, extras=None,
                 dtype=np.float32):
        self.xp, self.c, self.layers, self.kv, self.start, self.split = xp, config, layers, kv, start, split
        self.extras = extras or [{} for _ in layers]
        self.dtype = np.dtype(dtype)
        self.scale = self.dtype.type(config.attn_scale)

    def plan(self, batch) -> AttentionPlan:
        return plan_attention(batch, self.kv.page_size, self.dtype, self.xp, bias=self.bias,
                              rows_alone=self.rows_alone)

    def run(self, h, plan: AttentionPlan, rope, trace):
        """h (T, D) on xp through every layer, updated in place -> (T, D); rope[i] is layer i's (cos, sin)."""
        for i, layer in enumerate(self.layers):
            h = self._layer(i, layer, h, plan, *rope[i], trace)
        return h

    def hidden_out(self, h) -> np.ndarray:
        """A middle shard's output: (T, D) float32 on the host."""
        return to_numpy(h).astype(np.float32, copy=False)

    def head(self, rows, output_norm, output, eps):
        """The last shard's final norm and output head: rows (S, D) -> logits (S, V) on xp."""
        return matmul(self.xp, rms_norm(self.xp, rows, output_norm, eps), output, self.split)

    def window(self, i: int) -> int:
        """Keys layer i (of this shard) sees back from each query, 0 for all of them."""
        return self.c.sliding_window if self.c.is_local(self.start + i) else 0

    def _decode(self, q, kc, vc, plan: AttentionPlan, window: int = 0):
        bias = plan.decode_bias
        if window and int(plan.decode_lens.max()) > window:
            bias = self.xp.asarray(window_bias(plan.decode_lens, bias.shape[1], window, self.dtype))
        return attend_decode(self.xp, q, kc, vc, plan.decode_table, bias, self.scale)

    def _layer(self, i: int, layer, h, plan: AttentionPlan, cos, sin, trace):
        c, xp, spec, ex = self.c, self.xp, self.c.spec, self.extras[i]
        attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down = layer
        t = h.shape[0]
        nq, nkv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        x = rms_norm(xp, h, attn_norm, c.norm_eps)
        qkv = matmul(xp, x, wqkv, self.split)                             # (T, (H + 2 KVH) * Dh)
        if spec.qkv_bias:
            qkv += ex["qkv_bias"]
        q = qkv[:, :nq].reshape(t, c.n_heads, c.head_dim)
        k = qkv[:, nq:nq + nkv].reshape(t, c.n_kv_heads, c.head_dim)
        if spec.qk_norm:
            q, k = rms_norm(xp, q, ex["q_norm"], c.norm_eps), rms_norm(xp, k, ex["k_norm"], c.norm_eps)
        q, k = apply_rope(xp, q, cos, sin), apply_rope(xp, k, cos, sin)
        v = qkv[:, nq + nkv:].reshape(t, c.n_kv_heads, c.head_dim)
        kc, vc = self.kv.k[i], self.kv.v[i]
        write_kv(kc, vc, k, v, plan.write_pages, plan.write_slots)
        attn = xp.empty_like(q)                                           # (T, H, Dh)
        window = self.window(i)
        if plan.decode_rows.shape[0]:
            attn[plan.decode_rows] = self._decode(q[plan.decode_rows], kc, vc, plan, window)
        for p in plan.prefills:
            attn[p.rows] = attend_prefill(xp, q[p.rows], kc, vc, p.pages, p.start, self.scale, window)
        o = matmul(xp, attn.reshape(t, nq), wo, self.split)               # (T, D)
        if spec.post_norms:
            o = rms_norm(xp, o, ex["attn_post_norm"], c.norm_eps)
        h += o
        if trace is not None:
            trace("attn", attn)
        f = feed_forward(xp, rms_norm(xp, h, ffn_norm, c.norm_eps), w_gate_up, w_down, self.split,
                         spec.activation)                                 # (T, D)
        if spec.post_norms:
            f = rms_norm(xp, f, ex["ffn_post_norm"], c.norm_eps)
        h += f
        if trace is not None:
            trace("h", h)
        return h
