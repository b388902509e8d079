"""Which detail of llama.cpp's CPU forward explains our distance from its logits? (a probe, not the engine)

Runs the reference chats teacher-forced as one causal prefill each (prompt + greedy tokens) in
float32 over the GGUF weights, optionally emulating what llama.cpp's CPU backend computes under
llama-cpp-python 0.3.36's defaults (flash attention off, F16 KV cache) on an AVX-512 x86 build, and
prints max / mean |ours - target| over the reference's top-5 logits. With `ggml` it reproduces the
local llama.cpp bit for bit (max 2e-5, ~40 s); drop any one flag and it lands ~0.17 away, because the
8-bit activation rounding makes the forward chaotic (`cloud` measures llama.cpp's own spread).
Usage: python3 bench/parity_probe.py [--vs ref|local|both] [flag ...] | cloud [runs]
  rope32   RoPE as ggml: theta *= powf(base, -2/n) in float, cosf/sinf, and the rotation with one
           product fused (GCC's -ffp-contract=fast): fma(x0, c, -(x1*s)), fma(x0, s, x1*c)
  kvf16    quick attention emulation: K, V, Q and softmax weights rounded to fp16, numpy's order
  attn     the non-flash attention exactly: F16 cache, Q and P converted to F16, KQ and KQV by
           llamafile tinyBLAS<16> (16 fma lanes, _mm512_reduce_add_ps), softmax by ggml_v_expf with
           the sum in double and a multiply by (float)(1/sum)
  q8act    Q4_1 x Q8_1 exactly as ggml_vec_dot_q4_1_q8_1 (AVX2 path): activations quantized to Q8_1
           (d = amax/127 in fp16, q = rint(x * 127/amax), block sum s = fp16(d * sum q)), 8 int lanes
           per block accumulated by fma, hsum_float_8, plus the running sum of m * s
  q8fast   the same Q4_1 x Q8_1 sum in BLAS order, x8 @ (d*q).T + s @ m.T (what an engine would do)
  q8head   the tied Q8_0 output head fed Q8_0 activations (its fp32 order does not feed back)
  silu     SiLU as ggml_v_silu: x / (1 + ggml_v_expf(-x))
  ggml     = rope32 attn q8act q8head silu
  --vs     target: the stored reference (ref, default), the installed llama-cpp-python at 1 thread,
           n_batch 512 (local), or both
  cloud N [flag ...]  N runs of the installed llama.cpp with blk.0.attn_norm nudged by +-1 ulp per
           element: their distance to the reference and to each other, where their centre lies; with
           flags, N runs of our forward nudged alike, and how far their centre is from llama.cpp's
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader

from services.modelstore.pull import pull
from services.modelstore.weight_cache import load_weights

REF = Path(__file__).parent.parent / "tests" / "data" / "smollm2-135m-q4_1.llamacpp.json"
F = np.float32
F16 = np.float16
GGML = ["rope32", "attn", "q8act", "q8head", "silu"]


class Q41:
    """A Q4_1 matrix as ggml holds it: per block of 32 a scale d, a min m and 4-bit q; W = d*q + m."""

    def __init__(self, raw: np.ndarray):
        blocks = raw.reshape(raw.shape[0], -1, 20)                   # d fp16, m fp16, 16 bytes of nibbles
        self.d = blocks[..., 0:2].copy().view(F16)[..., 0].astype(F)  # (out, nb)
        self.m = blocks[..., 2:4].copy().view(F16)[..., 0].astype(F)
        qs = blocks[..., 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], -1).astype(F)       # element j and j+16 share a byte
        # (nb, 8 lanes, 4, out): the AVX2 kernel sums 4 products per 32-bit lane, 8 lanes per block
        self.lanes = np.ascontiguousarray(q.reshape(raw.shape[0], -1, 8, 4).transpose(1, 2, 3, 0))
        self.dq = (q * self.d[..., None]).reshape(raw.shape[0], -1)    # d*q without the min, exact


def q41_layers(path: Path, n_layers: int) -> dict[str, list[Q41]]:
    """The raw Q4_1 matrices of every layer, fused as the weight cache fuses them (q|k|v, gate|up)."""
    tensors = {t.name: t for t in GGUFReader(str(path)).tensors}

    def fused(i, *names):
        return Q41(np.concatenate([np.asarray(tensors[f"blk.{i}.{n}.weight"].data) for n in names]))

    return {"wqkv": [fused(i, "attn_q", "attn_k", "attn_v") for i in range(n_layers)],
            "wo": [fused(i, "attn_output") for i in range(n_layers)],
            "w_gate_up": [fused(i, "ffn_gate", "ffn_up") for i in range(n_layers)],
            "w_down": [fused(i, "ffn_down") for i in range(n_layers)]}


def q8(x):
    """quantize_row_q8_0/q8_1 (x86 AVX2 path) on rows of x: (q as float, d as fp16, block sum s as fp16)."""
    t, n = x.shape
    b = x.reshape(t, n // 32, 32)
    amax = np.abs(b).max(-1)
    d = amax / F(127)
    inv = np.divide(F(127), amax, out=np.zeros_like(amax), where=amax != 0)
    q = np.rint(b * inv[..., None])                                   # _MM_ROUND_NEAREST: half to even
    s = (d * q.sum(-1)).astype(F16).astype(F)
    return q, d.astype(F16).astype(F), s


def mm_q41_q81_fast(x, w: Q41):
    """The same sum in BLAS order: what an engine would do (right in distribution, not bit for bit)."""
    q, d, s = q8(x)
    return (q * d[..., None]).reshape(x.shape) @ w.dq.T + s @ w.m.T


def q8_dequant(x):
    q, d, _ = q8(x)
    return (q * d[..., None]).reshape(x.shape)


def fma(a, b, c):
    """float32 fused multiply-add: the product is exact in float64 (one rounding but for rare double rounding)."""
    return (a.astype(np.float64) * b + c).astype(F)


def mm_q41_q81(x, w: Q41):
    """ggml_vec_dot_q4_1_q8_1 (AVX2 path) in its own fp32 order, for every row of x against every row of w.

    Per block: 8 lanes of int sums, acc_lane = fma(d4*d8, sum, acc_lane); then hsum_float_8 of the lanes,
    plus summs = the float running sum of m4 * s8 over blocks.
    """
    q, d, s = q8(x)
    t, nb = d.shape
    ql = q.reshape(t, nb, 8, 4).transpose(1, 2, 0, 3)                  # (nb, 8, t, 4)
    acc = np.zeros((8, t, w.d.shape[0]), F)
    summs = np.zeros((t, w.d.shape[0]), F)
    for b in range(nb):
        acc = fma(d[:, b, None] * w.d[None, :, b], ql[b] @ w.lanes[b], acc)   # ints exact in float32
        summs = summs + s[:, b, None] * w.m[None, :, b]                       # fp16*fp16: exact in float32
    hsum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
    return hsum + summs


_hex = float.fromhex
EXP_C = [F(_hex(c)) for c in ("0x1.8p23", "0x1.715476p+0", "0x1.7f7d1cp-20", "0x1.62e4p-1", "0x1.0e4020p-7",
                           "0x1.573e2ep-5", "0x1.555e66p-3", "0x1.fffdb6p-2", "0x1.ffffecp-1")]


def v_expf(x):
    """ggml_v_expf (vec.h, AVX512 path): ARM's polynomial expf, ~1.5 ulp, used by softmax and SiLU."""
    r, log2e, ln2lo, ln2hi, c1, c2, c3, c4, c5 = EXP_C
    with np.errstate(invalid="ignore", over="ignore"):
        z = fma(x, log2e, r)
        n = z - r
        b = fma(-n, ln2lo, fma(-n, ln2hi, x))
        u = b * b
        j = fma(fma(fma(c1, b, c2), u, fma(c3, b, c4)), u, fma(c5, b, F(1)))
        big = ~(np.abs(n) <= 192)
        res = np.ldexp(j, np.where(big, 0, n).astype(np.int32)).astype(F)
    return np.where(big, np.where(n > 0, F(np.inf), F(0)), res)


def reduce16(acc):
    """_mm512_reduce_add_ps (GCC): halves 8+8, 4+4, then (0+2)+(1+3), over the last axis."""
    a = acc[..., 8:] + acc[..., :8]
    a = a[..., 4:] + a[..., :4]
    return (a[..., 0] + a[..., 2]) + (a[..., 1] + a[..., 3])


def tinyblas_f16(a, b):
    """llamafile tinyBLAS<16, __m512> on F16 inputs: rows of a . rows of b, lane l sums k = l mod 16 by fma."""
    k = a.shape[-1]
    assert k % 16 == 0
    acc = np.zeros(a.shape[:-1] + (b.shape[-2], 16), F)
    for c in range(0, k, 16):
        acc = fma(a[..., :, None, c:c + 16], b[..., None, :, c:c + 16], acc)
    return reduce16(acc)


def attention_ggml(q, k, v):
    """The non-flash attention of llama.cpp's CPU backend, in its own fp32 order (q: (n, H, Dh) f32)."""
    n, H, Dh = q.shape
    KV = k.shape[1]
    nk = -(-n // 16) * 16       # masked padding cells (p = 0, V = 0) change no fma lane: any n_kv works
    kc = np.zeros((nk, KV, Dh), F)
    vc = np.zeros((nk, KV, Dh), F)
    kc[:n], vc[:n] = k.astype(F16), v.astype(F16)                     # the F16 cache
    qh = q.astype(F16).astype(F).reshape(n, KV, H // KV, Dh).transpose(1, 2, 0, 3)   # (KV, G, n, Dh)
    kq = tinyblas_f16(qh, kc.transpose(1, 0, 2)[:, None])               # (KV, G, n, nk)
    mask = np.where(np.arange(nk)[None] <= np.arange(n)[:, None], F(0), F(-np.inf))
    w = kq * F(1 / np.sqrt(Dh)) + mask
    e = v_expf(w - w.max(-1, keepdims=True))                            # ggml_vec_soft_max_f32
    tot = reduce16(e.reshape(e.shape[:-1] + (nk // 16, 16))).astype(np.float64).sum(-1, keepdims=True)
    p = e * (1.0 / tot).astype(F)
    p16 = p.astype(F16).astype(F)                                       # src1 of KQV converted to F16
    return tinyblas_f16(p16, vc.transpose(1, 2, 0)[:, None])            # (KV, G, n, Dh)


def rope_tables(pos, n_rot, base, f32):
    if not f32:
        inv = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
        a = pos[:, None].astype(np.float64) * inv[None]
        return np.cos(a).astype(F), np.sin(a).astype(F)
    # ggml_rope_cache_init: theta_scale = powf(base, -2/n_dims); theta *= theta_scale per pair, in float.
    scale = F(base) ** F(-2.0 / n_rot)
    theta = np.empty((len(pos), n_rot // 2), F)
    theta[:, 0] = pos
    for i in range(1, n_rot // 2):
        theta[:, i] = theta[:, i - 1] * scale
    t = theta.astype(np.float64)                   # glibc cosf/sinf: correctly rounded here
    return np.cos(t).astype(F), np.sin(t).astype(F)


def rope(x, cos, sin, contract):
    t, h, d = x.shape
    p = x.reshape(t, h, d // 2, 2)
    x0, x1 = p[..., 0], p[..., 1]
    c, s = cos[:, None], sin[:, None]
    if contract:   # ggml's rotate_pairs as GCC compiles it (-ffp-contract=fast): one product fused
        return np.stack([fma(x0, c, -(x1 * s)), fma(x0, s, x1 * c)], -1).reshape(t, h, d)
    return np.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(t, h, d)


def norm(x, w, eps):
    # ggml_compute_forward_rms_norm_f32: float squares summed in double, sum/n in double, then float
    ms = ((x * x).astype(np.float64).sum(-1, keepdims=True) / x.shape[-1]).astype(F)
    return x * (F(1) / np.sqrt(ms + F(eps))) * w


def forward(cfg, w, raw, tokens, flags):
    if "q8act" in flags:
        mm = lambda x, name, i: mm_q41_q81(x, raw[name][i])
    elif "q8fast" in flags:
        mm = lambda x, name, i: mm_q41_q81_fast(x, raw[name][i])
    else:
        mm = lambda x, name, i: x @ getattr(w, name)[i].T
    kvr = (lambda a: a.astype(F16).astype(F)) if "kvf16" in flags else (lambda a: a)
    n = len(tokens)
    H, KV, Dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    nq, nk = H * Dh, KV * Dh
    r32 = "rope32" in flags
    cos, sin = rope_tables(np.arange(n), cfg.rope_dims, cfg.rope_base, r32)
    x = w.token_embd[np.asarray(tokens)].copy()
    mask = np.triu(np.full((n, n), -np.inf, F), 1)
    scale = F(1 / np.sqrt(Dh))
    for i in range(cfg.n_layers):
        h = norm(x, w.attn_norm[i], cfg.norm_eps)
        qkv = mm(h, "wqkv", i)
        q = rope(qkv[:, :nq].reshape(n, H, Dh), cos, sin, r32)
        k = kvr(rope(qkv[:, nq:nq + nk].reshape(n, KV, Dh), cos, sin, r32))
        v = kvr(qkv[:, nq + nk:].reshape(n, KV, Dh))
        if "attn" in flags:
            o = attention_ggml(q, k, v)
        else:
            qg = kvr(q).reshape(n, KV, H // KV, Dh).transpose(1, 2, 0, 3)     # (KV, G, n, Dh)
            s = qg @ k.transpose(1, 2, 0)[:, None] * scale + mask
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True, dtype=np.float64).astype(F)
            o = kvr(p) @ v.transpose(1, 0, 2)[:, None]                          # (KV, G, n, Dh)
        x = x + mm(o.transpose(2, 0, 1, 3).reshape(n, nq), "wo", i)
        h = norm(x, w.ffn_norm[i], cfg.norm_eps)
        gu = mm(h, "w_gate_up", i)
        g, u = gu[:, :cfg.ffn_dim], gu[:, cfg.ffn_dim:]
        silu = g / (F(1) + v_expf(-g)) if "silu" in flags else g / (F(1) + np.exp(-g))
        x = x + mm(silu * u, "w_down", i)
    h = norm(x, w.output_norm, cfg.norm_eps)
    return (q8_dequant(h) if "q8head" in flags else h) @ w.output.T


def teacher_forced(chat):
    steps = chat["greedy_steps_top5"]
    return chat["prompt_ids"] + chat["greedy_ids"][:len(steps) - 1], [[t[0] for t in s] for s in steps]


def top5(loaded, raw, ref, flags):
    """Our logits at the reference's top-5 ids, (steps, 5) per chat."""
    out = []
    for chat in ref["chats"]:
        toks, ids = teacher_forced(chat)
        lg = forward(loaded.config, loaded.weights, raw, toks, flags)[len(chat["prompt_ids"]) - 1:]
        out.append(np.take_along_axis(lg, np.array(ids), 1))
    return out


def local_llamacpp(path, ref):
    """The installed llama-cpp-python's logits at the reference's top-5 ids (its defaults, 1 thread)."""
    from llama_cpp import Llama
    llm = Llama(model_path=str(path), n_ctx=1024, logits_all=True, n_threads=1, n_batch=512, verbose=False)
    out = []
    for chat in ref["chats"]:
        toks, ids = teacher_forced(chat)
        llm.reset()
        llm.eval(toks)
        lg = np.array(llm.scores[len(chat["prompt_ids"]) - 1:len(toks)])
        out.append(np.take_along_axis(lg, np.array(ids), 1))
    return out


def llamacpp_cloud(path, ref, count):
    """llama.cpp's own realizations: each run nudges blk.0.attn_norm by a random +-1 ulp per element."""
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "nudged.gguf"
        shutil.copy(path, copy)
        reader = GGUFReader(str(copy), "r+")
        norm_w = next(t for t in reader.tensors if t.name == "blk.0.attn_norm.weight").data
        base = norm_w.copy()
        out = []
        for seed in range(count):
            norm_w[:] = nudged(base, seed)
            out.append(local_llamacpp(copy, ref))
        return out


def summary(a, b) -> str:
    d = [np.abs(x - y) for x, y in zip(a, b)]
    flat = np.concatenate([x.ravel() for x in d])
    c = int(np.argmax([x.max() for x in d]))
    step = np.unravel_index(d[c].argmax(), d[c].shape)[0]
    return (f"mean {flat.mean():.4f} max {flat.max():.3g} (chat {c} step {step}), >1.0: {(flat > 1).sum()}, "
            f"chat 0 step 10: {d[0][10].max():.2f}")


def nudged(base, seed):
    """base with each element moved one ulp up or down, by a seeded coin."""
    up = np.random.default_rng(seed).random(base.shape) < 0.5
    return np.where(up, np.nextafter(base, F(np.inf)), np.nextafter(base, F(-np.inf)))


def centre(runs):
    return [np.mean([r[c] for r in runs], 0) for c in range(len(runs[0]))]


def cloud(path, loaded, raw, ref, want, count, flags):
    """How far llama.cpp's own 1-ulp realizations land from the reference, and where their centre lies."""
    local = local_llamacpp(path, ref)
    runs = llamacpp_cloud(path, ref, count)
    for k, run in enumerate(runs):
        print(f"llama.cpp +-1 ulp #{k}: vs reference {summary(run, want)} | vs unperturbed {summary(run, local)}")
    spread = np.concatenate([np.std([r[c] for r in runs], 0).ravel() for c in range(len(want))])
    exact = top5(loaded, None, ref, [])
    print(f"per-logit std over the cloud: mean {spread.mean():.3f}, max {spread.max():.2f}")
    print(f"llama.cpp centre vs reference: {summary(centre(runs), want)}")
    print(f"llama.cpp centre vs exact fp32: {summary(centre(runs), exact)}")
    print(f"exact fp32 vs reference: {summary(exact, want)}")
    if not flags:
        return
    w = loaded.weights
    base = w.attn_norm.copy()
    ours = []
    for seed in range(count):
        w.attn_norm = base.copy()
        w.attn_norm[0] = nudged(base[0], seed)
        ours.append(top5(loaded, raw, ref, flags))
        print(f"{' '.join(flags)} +-1 ulp #{seed}: vs reference {summary(ours[-1], want)}")
    w.attn_norm = base
    print(f"{' '.join(flags)} centre vs llama.cpp centre: {summary(centre(ours), centre(runs))}")
    print(f"{' '.join(flags)} centre vs exact fp32: {summary(centre(ours), exact)}")


def main(argv):
    vs = "ref"
    if "--vs" in argv:
        j = argv.index("--vs")
        vs, argv = argv[j + 1], argv[:j] + argv[j + 2:]
    flags = [f for a in argv for f in (GGML if a == "ggml" else [a])]
    path = pull()
    loaded = load_weights(path, 0, 30)
    ref = json.loads(REF.read_text())
    want = [np.array([[t[1] for t in s] for s in c["greedy_steps_top5"]]) for c in ref["chats"]]
    raw = q41_layers(path, loaded.config.n_layers) if {"q8act", "q8fast"} & set(flags) else None
    if flags[:1] == ["cloud"]:
        cloud(path, loaded, raw, ref, want, int(flags[1]), flags[2:])
        return
    targets = {}
    if vs in ("ref", "both"):
        targets["reference"] = want
    if vs in ("local", "both"):
        targets["local llama.cpp"] = local_llamacpp(path, ref)
    ours = top5(loaded, raw, ref, flags)
    for name, target in targets.items():
        print(f"{' '.join(flags) or 'exact fp32'} vs {name}: {summary(ours, target)}")


if __name__ == "__main__":
    main(sys.argv[1:])
