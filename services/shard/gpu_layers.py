"""The layer loop of a GPU shard: a step's launches over device buffers, the same launches whether
they run at once (a prompt chunk) or are captured into a graph that a decode step replays.

Per layer: q|k|v projection, then one kernel for the bias, q/k norms, RoPE and the KV write, one
for attention over the pages (every row of the batch, decode rows and prompt rows alike), the
output projection, the residual add fused with the next RMSNorm, the gate|up projection and
its gate, the down projection. Hidden states stay float32; the KV cache is float16; weights are
read in their GGUF blocks (kernels.gpu.matrix). Nothing here copies to or from the host.
"""

from __future__ import annotations

import numpy as np

from kernels.gpu import ops
from kernels.rope import frequencies
from services.shard.gpu_plan import Layout
from services.shard.gpu_weights import DeviceWeights

F32 = np.float32


class Workspace:
    """The device buffers of a step of up to `rows` tokens, `table_rows` x `width` pages of table and
    (the last shard) `logit_rows` rows of logits, allocated once: a captured graph holds their
    addresses."""

    def __init__(self, dev, config, rows: int, table_rows: int, width: int, logit_rows: int):
        c, z = config, dev.zeros
        nq = c.n_heads * c.head_dim
        self.layout = Layout(rows, table_rows, width)
        self.rows = rows
        self.header = z(self.layout.size, np.int32)
        self.h, self.x, self.o = z((rows, c.d_model), F32), z((rows, c.d_model), F32), z((rows, c.d_model), F32)
        self.qkv = z((rows, c.qkv_dim), F32)
        self.q, self.attn = z((rows, nq), F32), z((rows, nq), F32)
        self.gu, self.act = z((rows, 2 * c.ffn_dim), F32), z((rows, c.ffn_dim), F32)
        self.logits = z((logit_rows, c.vocab_size), F32) if logit_rows else None   # the last shard's

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in (self.header, self.h, self.x, self.o, self.qkv, self.q, self.attn,
                                           self.gu, self.act, self.logits) if a is not None)


class GpuLayers:
    """Layers [start, end) of `config` with weights `w` on `dev`, over the paged cache `kv` (float16
    on dev); `first` embeds tokens, `last` ends with the norm and the output head."""

    def __init__(self, dev, config, w: DeviceWeights, kv, start: int, first: bool, last: bool):
        self.dev, self.c, self.w, self.kv, self.start = dev, config, w, kv, start
        self.first, self.last = first, last
        self.heads = ops.Heads(config.n_heads, config.n_kv_heads, config.head_dim)
        n = len(w.layers)
        self.k = [kv.k[i].reshape(-1, config.n_kv_heads, config.head_dim) for i in range(n)]
        self.v = [kv.v[i].reshape(-1, config.n_kv_heads, config.head_dim) for i in range(n)]
        ropes = {}
        self.rope = []
        for i in range(n):
            key = config.rope(start + i)
            if key not in ropes:
                freqs, mscale = frequencies(config.rope_dims, float(key[0]), key[1])
                ropes[key] = ops.Rope(dev.constant(np.asarray(freqs, np.float64)), float(mscale), config.rope_dims)
            self.rope.append(ropes[key])
        self.window = [config.sliding_window if config.is_local(start + i) else 0 for i in range(n)]
        self.embed_scale = float(np.float32(np.sqrt(config.d_model))) if config.spec.embed_scale_sqrt_d else 1.0
        self._scratch = None

    def run(self, ws: Workspace, layout: Layout, rows: int, head_rows: int, eager: bool) -> None:
        """The step over rows [0, rows) of `ws`, its header uploaded in `layout` (hidden states too,
        after the first shard); the last shard's logits of its first `head_rows` head rows into
        ws.logits. eager: prompt chunks past ops.KERNEL_ROWS multiply by cuBLAS."""
        c, dev = self.c, self.dev
        f = layout.views(ws.header)
        h, x = ws.h[:rows], ws.x[:rows]
        if self.first:
            ops.embed(dev, self.w.token_embd, f["tokens"], h, self.embed_scale)
        scratch = self._scratch_buffer() if eager and rows > ops.KERNEL_ROWS else None
        for i, layer in enumerate(self.w.layers):
            if i == 0:
                ops.rms_norm(dev, h, layer.attn_norm, x, c.norm_eps)
            self._attention_block(i, layer, ws, f, rows, scratch)
            o = ws.o[:rows]
            ops.add_rms_norm(dev, h, o, layer.ffn_norm, x, c.norm_eps)
            gu, act = ws.gu[:rows], ws.act[:rows]
            ops.matmul(dev, x, layer.w_gate_up, gu, scratch)                  # (T, 2F)
            ops.gate(dev, gu, act, c.spec.activation)                         # (T, F)
            ops.matmul(dev, act, layer.w_down, o, scratch)                    # (T, D)
            if layer.ffn_post_norm is not None:
                ops.rms_norm(dev, o, layer.ffn_post_norm, o, c.norm_eps)
            if i + 1 < len(self.w.layers):
                ops.add_rms_norm(dev, h, o, self.w.layers[i + 1].attn_norm, x, c.norm_eps)
            else:
                ops.add_rows(dev, h, o)
        if self.last and head_rows:   # none: a batch of embeddings only
            self.head(ws, f["head_rows"][:head_rows], ws.logits[:head_rows])

    def _attention_block(self, i: int, layer, ws: Workspace, f: dict, rows: int, scratch) -> None:
        """ws.o[:rows] = the attention's output projection (post-normed where the model does)."""
        c, dev = self.c, self.dev
        x, qkv, q, attn, o = ws.x[:rows], ws.qkv[:rows], ws.q[:rows], ws.attn[:rows], ws.o[:rows]
        ops.matmul(dev, x, layer.wqkv, qkv, scratch)                           # (T, (H + 2 KVH) Dh)
        ops.qkv_rope_kv(dev, qkv, layer.qk, c.norm_eps, f["positions"][:rows], f["slots"][:rows], self.rope[i],
                        self.heads, q, self.k[i], self.v[i])
        ops.attention(dev, q, self.k[i], self.v[i], f["table"], f["row_seq"][:rows], f["row_len"][:rows],
                      self.heads, self.kv.page_size, self.window[i], c.attn_scale, attn)
        ops.matmul(dev, attn, layer.wo, o, scratch)                            # (T, D)
        if layer.attn_post_norm is not None:
            ops.rms_norm(dev, o, layer.attn_post_norm, o, c.norm_eps)

    def head(self, ws: Workspace, rows_idx, logits) -> None:
        """logits (S, V) of the hidden rows rows_idx (S,): final norm, output head, soft-cap."""
        n = logits.shape[0]
        xh = ws.x[:n]                                       # free again: the layers are done
        ops.gather_rows(self.dev, ws.h, rows_idx, xh)
        ops.rms_norm(self.dev, xh, self.w.output_norm, xh, self.c.norm_eps)
        ops.matmul(self.dev, xh, self.w.output, logits)     # the kernel at any count: no V x D scratch
        if self.c.final_softcap:
            ops.softcap(self.dev, logits, self.c.final_softcap)

    @property
    def scratch_bytes(self) -> int:
        return 0 if self._scratch is None else int(self._scratch.nbytes)

    def _scratch_buffer(self):
        if self._scratch is None:
            self._scratch = self.dev.zeros(ops.SCRATCH_FLOATS, F32)
        return self._scratch
