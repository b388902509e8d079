"""Each device kernel against what the CPU computes (kernels.norm, kernels.rope, kernels.ffn, the
CPU's dequantization, kernels.sampling, a float64 attention written out here). On numpy this
checks each reference; on a GPU, each CUDA kernel, and its output against its reference's."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.ffn import gelu_tanh, silu
from kernels.gpu import ops
from kernels.gpu.kernels import KERNELS
from kernels.gpu.matrix import from_parts
from kernels.norm import rms_norm
from kernels.rope import RopeScaling, apply_rope, frequencies, rope_tables
from kernels.sampling import sample
from wire.messages.sampling import SamplingParams

from .cases import KINDS, both, put, weight

F32 = np.float32
RNG = np.random.default_rng


def close(dev, got, want, gpu_rtol, gpu_atol, exact=False):
    """Equal on numpy where `exact` (the reference is the CPU's arithmetic), else within float32 rounding;
    within the GPU's tolerance on a GPU (another summation order, CUDA's expf/tanhf)."""
    if dev.name == "numpy" and exact:
        np.testing.assert_array_equal(got, want)
    elif dev.name == "numpy":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose(got, want, rtol=gpu_rtol, atol=gpu_atol)


@pytest.mark.parametrize("d", [64, 576, 2048])
def test_rms_norm_and_the_residual_add_fused_with_it(dev, d):
    rng = RNG(d)
    h, delta = rng.standard_normal((5, d)).astype(F32), rng.standard_normal((5, d)).astype(F32)
    w = (1 + 0.1 * rng.standard_normal(d)).astype(F32)

    def make(dv):
        a = put(dv, h=h, delta=delta, w=w, out=np.zeros_like(h), x=h)
        ops.rms_norm(dv, a["x"], a["w"], a["x"], 1e-5)                    # in place
        ops.add_rms_norm(dv, a["h"], a["delta"], a["w"], a["out"], 1e-6)
        return {k: dv.download(a[k]) for k in ("x", "h", "out")}
    got, ref = both(dev, make)
    close(dev, got["x"], rms_norm(np, h, w, 1e-5), 2e-6, 1e-6, exact=True)
    np.testing.assert_array_equal(got["h"], h + delta)                   # one rounding, any device
    close(dev, got["out"], rms_norm(np, h + delta, w, 1e-6), 2e-6, 1e-6, exact=True)
    close(dev, got["out"], ref["out"], 2e-6, 1e-6, exact=True)


def test_add_gather_and_softcap(dev):
    rng = RNG(1)
    h, delta = rng.standard_normal((7, 40)).astype(F32), rng.standard_normal((7, 40)).astype(F32)
    idx = np.array([6, 0, 3, 3], np.int32)

    def make(dv):
        a = put(dv, h=h, delta=delta, idx=idx, dst=np.zeros((4, 40), F32), x=h * 40)
        ops.add_rows(dv, a["h"], a["delta"])
        ops.gather_rows(dv, a["h"], a["idx"], a["dst"])
        ops.softcap(dv, a["x"], 30.0)
        return {k: dv.download(a[k]) for k in ("h", "dst", "x")}
    got, _ = both(dev, make)
    np.testing.assert_array_equal(got["h"], h + delta)
    np.testing.assert_array_equal(got["dst"], (h + delta)[idx])
    close(dev, got["x"], np.tanh(h * 40 / F32(30)) * F32(30), 1e-6, 1e-5, exact=True)


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_gates(dev, activation):
    rng = RNG(2)
    gu = (4 * rng.standard_normal((9, 2 * 1536))).astype(F32)
    gu[0, :6] = [-11, -10, 10, 11, 0, np.float16(0.5)]           # each side of GELU's exact range
    f = gu.shape[1] // 2

    def make(dv):
        a = put(dv, gu=gu, out=np.zeros((9, f), F32))
        ops.gate(dv, a["gu"], a["out"], activation)
        return {"out": dv.download(a["out"])}
    got, ref = both(dev, make)
    act = silu(np, gu[:, :f]) if activation == "silu" else gelu_tanh(np, gu[:, :f])
    # GELU rounds to float16 twice: CUDA's tanhf may land on the neighbouring float16 now and then.
    tol = 1e-5 if activation == "silu" else 2e-3
    close(dev, got["out"], act * gu[:, f:], tol, 1e-5, exact=True)
    close(dev, got["out"], ref["out"], tol, 1e-5, exact=True)


ROPE_CASES = {   # heads, kv heads, head dim, rotated dims, bias, q/k norm, scaling
    "llama-64": (9, 3, 64, 64, False, False, RopeScaling()),
    "qwen2-bias": (4, 2, 16, 16, True, False, RopeScaling()),
    "qwen3-norms-partial": (4, 2, 32, 24, False, True, RopeScaling(freq_scale=0.25, yarn_orig_ctx=64)),
    "gemma-256": (4, 1, 256, 256, False, True, RopeScaling(attn_factor=1.5)),
    "mistral-8": (8, 2, 8, 8, True, True, RopeScaling(freq_scale=0.5)),
}


@pytest.mark.parametrize("case", sorted(ROPE_CASES))
def test_qkv_bias_norms_rope_and_the_kv_write(dev, case):
    n_heads, n_kv, dh, n_rot, has_bias, has_norm, scaling = ROPE_CASES[case]
    rng = RNG(3)
    t, pages, page = 6, 4, 4
    width = (n_heads + 2 * n_kv) * dh
    qkv = rng.standard_normal((t, width)).astype(F32)
    bias = (0.5 * rng.standard_normal(width)).astype(F32)
    qn, kn = (1 + 0.1 * rng.standard_normal((2, dh))).astype(F32)
    pos = np.array([0, 1, 2, 700, 9, 3], np.int32)
    slot = np.array([0, 1, 2, 13, -1, 9], np.int32)                      # row 4 is padding
    freqs, mscale = frequencies(n_rot, 10000.0, scaling)
    cache0 = np.full((pages * page, n_kv, dh), 7.0, np.float16)

    def make(dv):
        a = put(dv, qkv=qkv, bias=bias, qn=qn, kn=kn, pos=pos, slot=slot, freqs=np.asarray(freqs),
                q=np.zeros((t, n_heads * dh), F32), k=cache0, v=cache0)
        extras = ops.QKExtras(a["bias"], has_bias, a["qn"], a["kn"], has_norm)
        ops.qkv_rope_kv(dv, a["qkv"], extras, 1e-6, a["pos"], a["slot"], ops.Rope(a["freqs"], mscale, n_rot),
                        ops.Heads(n_heads, n_kv, dh), a["q"], a["k"], a["v"])
        return {k: dv.download(a[k]) for k in ("q", "k", "v")}
    got, ref = both(dev, make)
    # What services/shard/array_layers.py does, op by op.
    x = qkv + bias if has_bias else qkv.copy()
    nq, nk = n_heads * dh, n_kv * dh
    q, k, v = x[:, :nq].reshape(t, n_heads, dh), x[:, nq:nq + nk].reshape(t, n_kv, dh), x[:, nq + nk:]
    if has_norm:
        q, k = rms_norm(np, q, qn, 1e-6), rms_norm(np, k, kn, 1e-6)
    cos, sin = rope_tables(np, pos, n_rot, 10000.0, F32, scaling)
    want_k, want_v = cache0.copy(), cache0.copy()
    live = slot >= 0
    want_k[slot[live]] = apply_rope(np, k, cos, sin)[live]
    want_v[slot[live]] = v.reshape(t, n_kv, dh)[live]
    close(dev, got["q"], apply_rope(np, q, cos, sin).reshape(t, nq), 1e-5, 1e-5, exact=True)
    close(dev, got["q"], ref["q"], 1e-5, 1e-5, exact=True)
    for name, want in (("k", want_k), ("v", want_v)):
        untouched = np.ones(pages * page, bool)
        untouched[slot[live]] = False
        np.testing.assert_array_equal(got[name][untouched], cache0[untouched])   # padding wrote nothing
        close(dev, got[name].astype(F32), want.astype(F32), 1e-3, 1e-3, exact=True)


def _attention64(q, kc, vc, table, row_seq, row_len, page, window, scale):
    """Per row and head in float64: softmax over keys max(0, len - window) .. len - 1, q rounded to
    float16 as the keys are."""
    t, h, dh = q.shape
    n_kv = kc.shape[1]
    out = np.zeros((t, h, dh))
    for r in range(t):
        n = int(row_len[r])
        lo = n - window if window and n > window else 0
        keys = np.arange(lo, n)
        slots = table[row_seq[r], keys // page] * page + keys % page
        for hh in range(h):
            kh = hh // (h // n_kv)
            s = (kc[slots, kh].astype(np.float64) @ q[r, hh].astype(np.float16).astype(np.float64)) * scale
            p = np.exp(s - s.max()) if n else s
            out[r, hh] = (p / p.sum()) @ vc[slots, kh].astype(np.float64) if n else 0
    return out


@pytest.mark.parametrize("dh, n_heads, n_kv, window", [(64, 9, 3, 0), (16, 4, 2, 5), (256, 4, 1, 0), (8, 8, 2, 3),
                                                       (128, 8, 8, 0)])
def test_paged_attention_of_decode_and_prompt_rows_in_one_launch(dev, dh, n_heads, n_kv, window):
    rng = RNG(dh)
    page, n_pages = 4, 24
    kc = rng.standard_normal((n_pages * page, n_kv, dh)).astype(np.float16)
    vc = rng.standard_normal((n_pages * page, n_kv, dh)).astype(np.float16)
    table = np.zeros((3, 8), np.int32)
    table[0, :5] = [7, 2, 19, 4, 11]            # a prompt chunk: positions 13..17
    table[1, :3] = [0, 23, 5]                   # a decode row at position 9
    table[2, :1] = [16]                         # a first token
    row_seq = np.array([0, 0, 0, 0, 0, 1, 2, 0], np.int32)
    row_len = np.array([14, 15, 16, 17, 18, 10, 1, 0], np.int32)          # the last row is padding
    q = rng.standard_normal((8, n_heads, dh)).astype(F32)
    scale = 1 / np.sqrt(dh)

    def make(dv):
        a = put(dv, q=q.reshape(8, -1), kc=kc, vc=vc, table=table, seq=row_seq, len=row_len,
                out=np.full((8, n_heads * dh), 5.0, F32))
        ops.attention(dv, a["q"], a["kc"], a["vc"], a["table"], a["seq"], a["len"],
                      ops.Heads(n_heads, n_kv, dh), page, window, scale, a["out"])
        return {"out": dv.download(a["out"]).reshape(8, n_heads, dh)}
    got, ref = both(dev, make)
    want = _attention64(q, kc, vc, table, row_seq, row_len, page, window, scale)
    np.testing.assert_allclose(got["out"], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got["out"][-1], 0)
    close(dev, got["out"], ref["out"], 1e-4, 1e-5, exact=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("t", [1, 3, 8, 17])
def test_products_read_the_blocks_for_decode_rows(dev, kind, t):
    rows, cols = 7, 512                    # 7: a block's last warp has no row
    data, w = weight(kind, rows, cols, seed=t)
    x = RNG(t).standard_normal((t, cols)).astype(F32)
    out0 = np.full((t, rows + 5), -3.0, F32)                           # columns 2..8 are this matrix's

    def make(dv):
        a = put(dv, x=x, out=out0)
        m = from_parts(dv, [(kind, dv.constant(data))], cols)
        dv.launch(KERNELS[f"qmatmul_{kind}"], m.parts[0].data, rows, cols, a["x"], cols, t, a["out"], rows + 5, 2)
        return {"out": dv.download(a["out"])}
    check_product(dev, make, x, w, rows)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cols", [32, 512, 2048 + 32])     # units: one; 16; past 64 (both of a lane's in turn)
def test_the_one_row_product_reads_the_blocks_for_a_decode_step(dev, kind, cols):
    if kind.endswith("_k"):
        cols = 256 * -(-cols // 256)                         # a K-quant row is whole 256-weight blocks
    rows = 7
    data, w = weight(kind, rows, cols, seed=cols)
    x = RNG(cols).standard_normal((1, cols)).astype(F32)
    out0 = np.full((1, rows + 5), -3.0, F32)

    def make(dv):
        a = put(dv, x=x, out=out0)
        m = from_parts(dv, [(kind, dv.constant(data))], cols)
        dv.launch(KERNELS[f"qmatvec_{kind}"], m.parts[0].data, rows, cols, a["x"].reshape(-1), a["out"], rows + 5, 2)
        return {"out": dv.download(a["out"])}
    check_product(dev, make, x, w, rows)


def check_product(dev, make, x, w, rows):
    got, ref = both(dev, make)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    scale = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T
    assert np.all(np.abs(got["out"][:, 2:2 + rows] - want) <= 1e-5 * scale + 1e-6)
    np.testing.assert_array_equal(got["out"][:, :2], -3.0)
    np.testing.assert_array_equal(got["out"][:, 2 + rows:], -3.0)
    close(dev, got["out"], ref["out"], 1e-4, 1e-5, exact=True)


@pytest.mark.parametrize("kind", KINDS)
def test_dequant_and_embed_give_the_cpus_weights_bit_for_bit(dev, kind):
    data, w = weight(kind, 9, 768, seed=4)
    ids = np.array([8, 0, 3, 3], np.int32)

    def make(dv):
        m = from_parts(dv, [(kind, dv.constant(data))], 768)
        a = put(dv, ids=ids, full=np.zeros((9, 768), F32), rows=np.zeros((4, 768), F32))
        dv.launch(KERNELS[f"dequant_{kind}"], m.parts[0].data, 9, 768, a["full"])
        ops.embed(dv, m, a["ids"], a["rows"], float(F32(np.sqrt(768))))
        return {k: dv.download(a[k]) for k in ("full", "rows")}
    got, _ = both(dev, make)
    np.testing.assert_array_equal(got["full"], w)
    np.testing.assert_array_equal(got["rows"], w[ids] * F32(np.sqrt(768)))


def test_long_chunks_multiply_by_cublas_a_slab_at_a_time(dev, monkeypatch):
    monkeypatch.setattr(ops, "SCRATCH_FLOATS", 3 * 256)               # 3 rows of W a slab: 2 parts, 4 slabs
    (d1, w1), (d2, w2) = weight("q4_k", 5, 256, 5), weight("q6_k", 4, 256, 6)
    x = RNG(7).standard_normal((ops.KERNEL_ROWS + 3, 256)).astype(F32)

    def make(dv):
        m = from_parts(dv, [("q4_k", dv.constant(d1)), ("q6_k", dv.constant(d2))], 256)
        a = put(dv, x=x, out=np.zeros((x.shape[0], 9), F32), scratch=np.zeros(4096, F32))
        ops.matmul(dv, a["x"], m, a["out"], a["scratch"])
        return {"out": dv.download(a["out"])}
    got, _ = both(dev, make)
    np.testing.assert_allclose(got["out"], x @ np.concatenate([w1, w2]).T, rtol=1e-4, atol=1e-4)


def test_greedy_rows_are_the_samplers(dev):
    rng = RNG(8)
    logits = (3 * rng.standard_normal((6, 1000))).astype(F32)
    logits[1, [10, 20, 30]] = logits[1].max() + 1                      # a tie for the top: lowest id wins
    logits[2, :] = -np.inf
    logits[2, 500] = 0.0                                              # one finite logit
    logits[3, 7:9] = logits[3].max() + 2                              # tied top pair in the top-n
    params = [SamplingParams(temperature=0.0, top_logprobs=5)] * 6
    want = sample(logits, params, [np.zeros(0, np.int32)] * 6, [0] * 6)

    def make(dv):
        a = put(dv, z=logits, rows=np.arange(6, dtype=np.int32), out=np.zeros(6 * (3 + 10), np.int32))
        ops.greedy_top(dv, a["z"], a["rows"], 5, a["out"])
        return {"out": dv.download(a["out"])}
    got, _ = both(dev, make)
    out = got["out"]
    f = out.view(F32)
    np.testing.assert_array_equal(out[:6], want.tokens)
    np.testing.assert_allclose(f[6:12], want.logprobs, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(f[12:18], logits.max(1))
    np.testing.assert_array_equal(out[18:48].reshape(6, 5), want.top_ids)
    np.testing.assert_allclose(f[48:78].reshape(6, 5), want.top_logprobs, rtol=1e-5, atol=1e-5)
