"""The layer loop of a CPU float32 shard, through the C library's fused ops and reused buffers.

At one token per step, the numpy layer spends more time dispatching ~20 small ops, allocating
their results and reading array addresses than computing them. Here each layer is its four
projections plus five C ops (RMSNorm with the residual add before it, RoPE with the KV write,
attention with every row a decode query of its own length, the gate) into fixed buffers. The ops
of all layers form one Program (kernels.program), built once per batch size over buffers whose
addresses do not change (a step's pages, lengths and RoPE tables are copied into them), so a step
is one call into C (more only for float32 weights, whose products BLAS makes). Same arithmetic in
the same order as NumpyLayers with rows_alone: the hidden states come out bit-identical.

Every query row attends alone, prompt rows too (plan_attention's rows_alone): the quantized
kernels round activations to 8 bits, which turns a 1-ulp difference between a prompt's chunkings
into a different token, so no row may depend on its neighbours.

What an architecture adds to the llama layer runs as C ops between these (`Extras`; ops.c, with
the bits of NumpyLayers' numpy): q/k/v biases, per-head q/k norms, post-norms, the GELU gate in
place of SwiGLU's, and a sliding window as the attention's first key.
"""

from __future__ import annotations

import numpy as np

from kernels.ffn import gelu_tanh_table
from kernels.matmul import matmul
from kernels.norm import add_rms_norm
from kernels.program import Program
from services.shard.decode_plan import mark_decoded, plan_decode
from services.shard.plan import AttentionPlan, plan_attention

F32 = np.float32
KEEP_BYTES = 64 << 20   # buffers of recent row counts kept built (with their Programs), besides the newest


class Scratch:
    """The buffers of a forward over T rows, a step's attention inputs among them (their addresses
    are the Program's arguments): pages and slots written, page table (T, cap) and lengths, and each
    distinct RoPE table's cos and sin."""

    def __init__(self, t: int, d: int, h: int, kvh: int, dh: int, f: int, cap: int, n_rot: int, tables: int):
        self.t, self.cap = t, cap
        e = lambda *shape: np.empty(shape, dtype=F32)        # noqa: E731
        self.h, self.x, self.o = e(t, d), e(t, d), e(t, d)   # residual stream, normed input, block output
        self.qkv, self.q, self.attn = e(t, (h + 2 * kvh) * dh), e(t, h, dh), e(t, h, dh)
        self.gate_up, self.act = e(t, 2 * f), e(t, f)
        self.attn2d = self.attn.reshape(t, h * dh)
        self.pages, self.slots = np.zeros(t, np.int64), np.zeros(t, np.int64)
        self.table, self.lens = np.zeros((t, cap), np.int32), np.ones(t, np.int32)
        self.cos, self.sin = e(tables, t, n_rot // 2), e(tables, t, n_rot // 2)
        self.programs: dict[tuple, Program] = {}             # by (each layer's RoPE table, tracing)
        self.nbytes = sum(a.nbytes for a in (self.h, self.x, self.o, self.qkv, self.q, self.attn, self.gate_up,
                                             self.act, self.table, self.cos, self.sin))


class Extras:
    """One layer's steps beyond llama's: its weights (kept alive here, their addresses go to C) and
    its sliding window (keys each row sees back from itself, 0 for all)."""

    def __init__(self, config, extras: dict, window: int):
        f32 = lambda name: None if name not in extras else np.ascontiguousarray(extras[name], F32)  # noqa: E731
        self.c, self.window = config, window
        self.bias, self.q_norm, self.k_norm = f32("qkv_bias"), f32("q_norm"), f32("k_norm")
        self.attn_post, self.ffn_post = f32("attn_post_norm"), f32("ffn_post_norm")

    def before_rope(self, prog: Program, s: Scratch, where: str) -> None:
        """The ops on s.qkv before RoPE, in NumpyLayers' order: bias, then q's and k's per-head norms."""
        c, t = self.c, s.t
        row, eps = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim, float(c.norm_eps)
        if self.bias is not None:
            prog.op("add_bias", s.qkv, self.bias, t, row, where=where)
        if self.q_norm is not None:
            k_p = s.qkv.ctypes.data + 4 * c.n_heads * c.head_dim          # k's heads follow q's in a row
            prog.op("norm_heads", s.qkv, t, row, c.n_heads, c.head_dim, self.q_norm, eps, where=where)
            prog.op("norm_heads", k_p, t, row, c.n_kv_heads, c.head_dim, self.k_norm, eps, where=where)


class NativeLayers:
    """Runs layers of a ShardModel (float32 norms, weights float32 or QMatrix) with the C library `lib`."""

    rows_alone = True

    def __init__(self, lib, config, layers, kv, start: int = 0, extras=None):
        self.lib, self.c, self.layers, self.kv, self.start = lib, config, layers, kv, start
        self.scale = F32(config.attn_scale)
        self.gelu_table = gelu_tanh_table() if config.spec.activation == "gelu_tanh" else None
        self.extras = [Extras(config, ex, config.sliding_window if config.is_local(start + i) else 0)
                       for i, ex in enumerate(extras or [{} for _ in layers])]
        self.split = True       # float32 weights: OpenBLAS in small-matrix calls (kernels.matmul)
        # The norm weights as contiguous float32 (kept alive here: their addresses go to C).
        self.norms = [(np.ascontiguousarray(a, F32), np.ascontiguousarray(f, F32)) for a, _, _, f, _, _ in layers]
        self.ffn = int(layers[0][4].shape[0]) // 2
        self.scratches: dict[int, Scratch] = {}     # by row count, least recently used first (a batch's size varies)
        self.trace = None                           # the running step's trace, for its Programs' trace steps

    def plan(self, batch) -> AttentionPlan:
        return plan_attention(batch, self.kv.page_size, np.dtype(F32), np, bias=False, rows_alone=True)

    def decode_plan(self, batch, first: bool, vocab: int, d_model: int) -> AttentionPlan | None:
        """`plan` of a decode step, its checks included, in one C call; None for other batches."""
        return plan_decode(self.lib, self.kv, batch, first=first, vocab_size=vocab, d_model=d_model)

    def mark_written(self, plan: AttentionPlan) -> None:
        """The cache's mark_written after a step of decode_plan's."""
        mark_decoded(self.lib, self.kv, plan)

    def hidden_out(self, h: np.ndarray) -> np.ndarray:
        """A middle shard's output: a copy, since `h` is this object's buffer."""
        return h.copy()

    def head(self, rows: np.ndarray, output_norm, output, eps) -> np.ndarray:
        """Final norm (in C) and output head: rows (S, D) -> logits (S, V)."""
        x = add_rms_norm(np.ascontiguousarray(rows), None, output_norm, eps)
        return matmul(np, x, output, self.split)

    def _scratch(self, t: int, pages: int, n_rot: int, tables: int) -> Scratch:
        """The buffers for t rows whose page tables have `pages` columns (kept while they fit: a
        sequence's table grows a page at a time, the capacity doubles)."""
        s = self.scratches.pop(t, None)             # re-inserted last: the most recently used
        if s is not None and s.cap >= pages and s.cos.shape[0] == tables and 2 * s.cos.shape[2] == n_rot:
            self.scratches[t] = s
            return s
        c = self.c
        cap = max(pages, 2 * s.cap if s is not None else 8)
        s = self.scratches[t] = Scratch(t, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, self.ffn, cap, n_rot,
                                        tables)
        while len(self.scratches) > 1 and sum(x.nbytes for x in self.scratches.values()) > KEEP_BYTES + s.nbytes:
            del self.scratches[next(iter(self.scratches))]     # only a new one adds bytes: evict here alone
        return s

    def _gated(self, prog: Program, s: Scratch, where: str) -> None:
        """gate_up -> act: the GELU or SiLU gate times up, in C."""
        if self.gelu_table is not None:
            prog.op("geglu", s.gate_up, s.t, self.ffn, self.gelu_table, s.act, where=where)
        else:
            prog.op("swiglu", s.gate_up, s.t, self.ffn, s.act, where=where)

    def _matmul(self, prog: Program, x: np.ndarray, w, out: np.ndarray, where: str) -> None:
        prog.matmul(x, w, out, lambda: np.copyto(out, matmul(np, x, w, self.split)), where)

    def _program(self, s: Scratch, table_of: tuple[int, ...], trace: bool) -> Program:
        """Every layer's ops over s, layer i's RoPE from s's table table_of[i]; with trace, self.trace(name,
        array) after each layer's attention and output."""
        c, kv, t, d, eps = self.c, self.kv, s.t, self.c.d_model, float(self.c.norm_eps)
        prog = Program(self.lib)
        prog.op("rms_norm", s.h, None, self.norms[0][0], t, d, eps, s.x, where=f"layer {self.start}")
        for i, (_, wqkv, wo, _, w_gate_up, w_down) in enumerate(self.layers):
            where, ex, g = f"layer {self.start + i}", self.extras[i], table_of[i]
            kc, vc = kv.k.ctypes.data + i * kv.k.strides[0], kv.v.ctypes.data + i * kv.v.strides[0]
            self._matmul(prog, s.x, wqkv, s.qkv, where)                       # x -> qkv (T, (H + 2 KVH) * Dh)
            ex.before_rope(prog, s, where)                                     # + bias, q/k norms (some archs)
            prog.op("rope_kv", s.qkv, t, c.n_heads, c.n_kv_heads, c.head_dim, 2 * s.cos.shape[2],
                    s.cos[g].ctypes.data, s.sin[g].ctypes.data, s.pages, s.slots, kc, vc, kv.num_pages,
                    kv.page_size, s.q, where=where)                            # q -> q (T, H, Dh), k, v -> cache
            prog.op("attend", s.q, kc, vc, s.table, s.lens, t, c.n_heads, c.n_kv_heads, c.head_dim,
                    kv.page_size, s.cap, kv.num_pages, ex.window, float(self.scale), s.attn,
                    where=where)                                               # q -> attn (T, H, Dh)
            self._matmul(prog, s.attn2d, wo, s.o, where)                       # attn -> o (T, D)
            if trace:
                prog.py(lambda: self.trace("attn", s.attn.copy()))
            if ex.attn_post is not None:
                prog.op("rms_norm", s.o, None, ex.attn_post, t, d, eps, s.o, where=where)   # o = post-norm(o)
            prog.op("rms_norm", s.h, s.o, self.norms[i][1], t, d, eps, s.x, where=where)   # h += o; x = norm(h)
            self._matmul(prog, s.x, w_gate_up, s.gate_up, where)               # x -> gate_up (T, 2F)
            self._gated(prog, s, where)                                        # -> act (T, F)
            self._matmul(prog, s.act, w_down, s.o, where)                      # act -> o (T, D)
            if ex.ffn_post is not None:
                prog.op("rms_norm", s.o, None, ex.ffn_post, t, d, eps, s.o, where=where)    # o = post-norm(o)
            if i + 1 < len(self.layers):                                       # h += o; x = next layer's norm(h)
                prog.op("rms_norm", s.h, s.o, self.norms[i + 1][0], t, d, eps, s.x, where=where)
            else:
                prog.op("add", s.h, s.o, t * d, where=where)
            if trace:
                prog.py(lambda: self.trace("h", s.h.copy()))
        return prog.finish()

    def run(self, h_in: np.ndarray, plan: AttentionPlan, rope, trace) -> np.ndarray:
        """h_in (T, D) float32 through every layer -> (T, D) in this object's buffer (valid until the next
        run); rope[i] is layer i's (cos, sin)."""
        t = h_in.shape[0]
        if plan.decode_rows.shape[0] != t or plan.prefills:
            raise ValueError("the native layers take plans whose rows all attend alone "
                             "(plan_attention(rows_alone=True))")
        distinct: dict[int, tuple] = {}                # layers share a few RoPE tables
        table_of = tuple(distinct.setdefault(id(cs), (len(distinct), cs))[0] for cs in rope)
        firsts = [cs for _, cs in distinct.values()]
        table = plan.decode_table
        s = self._scratch(t, table.shape[1], 2 * firsts[0][0].shape[1], len(firsts))
        np.copyto(s.h, h_in)
        np.copyto(s.pages, plan.write_pages, casting="unsafe")
        np.copyto(s.slots, plan.write_slots, casting="unsafe")
        np.copyto(s.lens, plan.decode_lens, casting="unsafe")
        np.copyto(s.table[:, :table.shape[1]], table, casting="unsafe")
        for g, (cos, sin) in enumerate(firsts):
            np.copyto(s.cos[g], cos, casting="unsafe")
            np.copyto(s.sin[g], sin, casting="unsafe")
        key = (table_of, trace is not None)
        prog = s.programs.get(key)
        if prog is None:
            prog = s.programs[key] = self._program(s, table_of, trace is not None)
        self.trace = trace
        prog()
        return s.h
