"""The layer loop of a CPU float32 shard, through the C library's fused ops and reused buffers.

At one token per step, the numpy layer spends more time dispatching ~20 small ops, allocating
their results and reading array addresses (ctypes' `.ctypes.data` costs ~1 us) than computing
them. Here each layer is its four projections plus four C calls (RMSNorm with the residual add
before it, RoPE with the KV write, attention with every row a decode query of its own length)
and SwiGLU's ufuncs into fixed buffers, whose addresses are read once. Same arithmetic in the same
order as NumpyLayers with rows_alone: the hidden states come out bit-identical.

Every query row attends alone, prompt rows too (plan_attention's rows_alone): the quantized
kernels round activations to 8 bits, which turns a 1-ulp difference between a prompt's chunkings
into a different token, so no row may depend on its neighbours.

What an architecture adds to the llama layer runs as C calls between these (`Extras`; ops.c, with
the bits of NumpyLayers' numpy): q/k/v biases, per-head q/k norms, post-norms, the GELU gate in
place of SwiGLU's ufuncs, and a sliding window as the attention's first key.
"""

from __future__ import annotations

import numpy as np

from kernels.ffn import gelu_tanh_table, swiglu_into
from kernels.matmul import matmul
from kernels.norm import add_rms_norm
from kernels.qmatmul import bound_qmatmul
from kernels.qmatrix import QUANTIZED
from services.shard.plan import AttentionPlan, plan_attention

F32 = np.float32


def _addr(a: np.ndarray) -> int:
    return a.ctypes.data


class Scratch:
    """The buffers of a forward over T rows, and their addresses."""

    def __init__(self, t: int, d: int, h: int, kvh: int, dh: int, f: int):
        self.t = t
        e = lambda *shape: np.empty(shape, dtype=F32)        # noqa: E731
        self.h, self.x, self.o = e(t, d), e(t, d), e(t, d)   # residual stream, normed input, block output
        self.qkv, self.q, self.attn = e(t, (h + 2 * kvh) * dh), e(t, h, dh), e(t, h, dh)
        self.gate_up, self.tmp, self.act = e(t, 2 * f), e(t, f), e(t, f)
        self.attn2d = self.attn.reshape(t, h * dh)
        self.gate, self.up = self.gate_up[:, :f], self.gate_up[:, f:]
        self.projections: list[tuple] = []                   # per layer: qkv, o, gate_up, down (no arguments)
        self.before_rope: list[list] = []                    # per layer: (C function, its arguments), in order
        self.gated = None                                    # gate_up -> act, no arguments (NativeLayers._gated)
        for name in ("h", "x", "o", "qkv", "q", "attn", "gate_up", "act"):
            setattr(self, name + "_p", _addr(getattr(self, name)))


class Extras:
    """One layer's steps beyond llama's: its weights (kept alive here, their addresses go to C) and
    its sliding window (keys each row sees back from itself, 0 for all)."""

    def __init__(self, config, extras: dict, window: int):
        f32 = lambda name: None if name not in extras else np.ascontiguousarray(extras[name], F32)  # noqa: E731
        self.c, self.window = config, window
        self.bias, self.q_norm, self.k_norm = f32("qkv_bias"), f32("q_norm"), f32("k_norm")
        self.attn_post, self.ffn_post = f32("attn_post_norm"), f32("ffn_post_norm")
        self.post_p = None if self.attn_post is None else (_addr(self.attn_post), _addr(self.ffn_post))

    def before_rope(self, lib, s: Scratch) -> list[tuple]:
        """The C calls on s.qkv before RoPE, in NumpyLayers' order: bias, then q's and k's per-head norms."""
        c, t = self.c, s.t
        row, eps = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim, float(c.norm_eps)
        calls = []
        if self.bias is not None:
            calls.append((lib.lb_add_bias, (s.qkv_p, _addr(self.bias), t, row)))
        if self.q_norm is not None:
            k_p = s.qkv_p + 4 * c.n_heads * c.head_dim                     # k's heads follow q's in a row
            calls.append((lib.lb_rms_norm_heads, (s.qkv_p, t, row, c.n_heads, c.head_dim, _addr(self.q_norm), eps)))
            calls.append((lib.lb_rms_norm_heads, (k_p, t, row, c.n_kv_heads, c.head_dim, _addr(self.k_norm), eps)))
        return calls


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
        self._keep = [(np.ascontiguousarray(a, F32), np.ascontiguousarray(f, F32)) for a, _, _, f, _, _ in layers]
        self.norms = [(_addr(a), _addr(f)) for a, f in self._keep]
        self.ffn = int(layers[0][4].shape[0]) // 2
        self.scratch: Scratch | None = None

    def plan(self, batch) -> AttentionPlan:
        return plan_attention(batch, self.kv.page_size, np.dtype(F32), np, bias=False, rows_alone=True)

    def hidden_out(self, h: np.ndarray) -> np.ndarray:
        """A middle shard's output: a copy, since `h` is this object's buffer."""
        return h.copy()

    def head(self, rows: np.ndarray, output_norm, output, eps) -> np.ndarray:
        """Final norm (in C) and output head: rows (S, D) -> logits (S, V)."""
        x = add_rms_norm(np.ascontiguousarray(rows), None, output_norm, eps)
        return matmul(np, x, output, self.split)

    def _scratch(self, t: int) -> Scratch:
        if self.scratch is None or self.scratch.t != t:
            c = self.c
            s = Scratch(t, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, self.ffn)
            s.projections = [(self._projection(s.x, wqkv, s.qkv), self._projection(s.attn2d, wo, s.o),
                              self._projection(s.x, w_gate_up, s.gate_up), self._projection(s.act, w_down, s.o))
                             for _, wqkv, wo, _, w_gate_up, w_down in self.layers]
            s.before_rope = [ex.before_rope(self.lib, s) for ex in self.extras]
            s.gated = self._gated(s)
            self.scratch = s
        return self.scratch

    def _gated(self, s: Scratch):
        """gate_up -> act as a call without arguments returning a C status: GELU's in C, SwiGLU's ufuncs."""
        if self.gelu_table is not None:
            geglu, args = self.lib.lb_geglu, (s.gate_up_p, s.t, self.ffn, _addr(self.gelu_table), s.act_p)
            return lambda: geglu(*args)
        # SwiGLU stays in numpy: its exp is numpy's own SIMD code, which libm's expf does not match bit for bit.
        gate, up, act, tmp = s.gate, s.up, s.act, s.tmp

        def swiglu() -> int:
            swiglu_into(gate, up, act, tmp)
            return 0
        return swiglu

    def _projection(self, x: np.ndarray, w, out: np.ndarray):
        """x . w -> out as a call without arguments (its lookups done once, not per token)."""
        if isinstance(w, QUANTIZED):
            return bound_qmatmul(x, w, out)
        return lambda: np.copyto(out, matmul(np, x, w, self.split))

    def run(self, h_in: np.ndarray, plan: AttentionPlan, rope, trace) -> np.ndarray:
        """h_in (T, D) float32 through every layer -> (T, D) in this object's buffer (valid until the next
        run); rope[i] is layer i's (cos, sin)."""
        c, kv = self.c, self.kv
        t, d, eps = h_in.shape[0], c.d_model, float(c.norm_eps)
        s = self._scratch(t)
        np.copyto(s.h, h_in)
        pages = np.ascontiguousarray(plan.write_pages, np.int64)
        slots = np.ascontiguousarray(plan.write_slots, np.int64)
        table, lens = np.ascontiguousarray(plan.decode_table, np.int32), plan.decode_lens
        # Layers share a few RoPE tables: each one's arguments are built once (an address costs ~1 us).
        tables, rope_args, where = [], [], (_addr(pages), _addr(slots))
        by_table: dict[int, tuple] = {}
        for cs in rope:
            if id(cs) not in by_table:
                cos, sin = (np.ascontiguousarray(a, F32) for a in cs)
                tables.append((cs, cos, sin))                               # kept alive here
                by_table[id(cs)] = (t, c.n_heads, c.n_kv_heads, c.head_dim, 2 * cos.shape[1], _addr(cos),
                                    _addr(sin), *where)
            rope_args.append(by_table[id(cs)])
        if plan.decode_rows.shape[0] != t or plan.prefills:
            raise ValueError("the native layers take plans whose rows all attend alone "
                             "(plan_attention(rows_alone=True))")
        attn_args = {w: (_addr(table), _addr(lens), t, c.n_heads, c.n_kv_heads, c.head_dim, kv.page_size,
                         table.shape[1], kv.num_pages, w, float(self.scale), s.attn_p)
                     for w in {ex.window for ex in self.extras}}
        k0, v0, stride, num_pages, page = _addr(kv.k), _addr(kv.v), kv.k.strides[0], kv.num_pages, kv.page_size
        norm, rope, attend = self.lib.lb_rms_norm, self.lib.lb_rope_write_kv, self.lib.lb_attend_decode
        h_p, x_p, o_p, qkv_p, q_p, gated = s.h_p, s.x_p, s.o_p, s.qkv_p, s.q_p, s.gated
        rc = norm(h_p, None, self.norms[0][0], t, d, eps, x_p)
        for i, (qkv, o, gate_up, down) in enumerate(s.projections):
            kc, vc, ex = k0 + i * stride, v0 + i * stride, self.extras[i]
            qkv()                                                           # x -> qkv (T, (H + 2 KVH) * Dh)
            for op, args in s.before_rope[i]:                               # + bias, q/k norms (where the arch has them)
                rc |= op(*args)
            rc |= rope(qkv_p, *rope_args[i], kc, vc, num_pages, page, q_p)  # q -> q (T, H, Dh), k, v -> cache
            rc |= attend(q_p, kc, vc, *attn_args[ex.window])                # q -> attn (T, H, Dh), its window's keys
            o()                                                             # attn -> o (T, D)
            if trace is not None:
                trace("attn", s.attn.copy())
            if ex.post_p is not None:
                rc |= norm(o_p, None, ex.post_p[0], t, d, eps, o_p)         # o = post-attention norm(o)
            rc |= norm(h_p, o_p, self.norms[i][1], t, d, eps, x_p)          # h += o; x = norm(h)
            gate_up()                                                       # x -> gate_up (T, 2F)
            rc |= gated()                                                   # -> act (T, F)
            down()                                                          # act -> o (T, D)
            if ex.post_p is not None:
                rc |= norm(o_p, None, ex.post_p[1], t, d, eps, o_p)         # o = post-FFN norm(o)
            if i + 1 < len(self.norms):                                     # h += o; x = next layer's norm(h)
                rc |= norm(h_p, o_p, self.norms[i + 1][0], t, d, eps, x_p)
            else:
                np.add(s.h, s.o, out=s.h)
            if trace is not None:
                trace("h", s.h.copy())
            if rc:
                raise ValueError(f"a native op of layer {self.start + i} refused its arguments (code {rc})")
        return s.h
