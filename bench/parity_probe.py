"""Which detail of llama.cpp's CPU forward explains our distance from its logits? (a probe, not the engine)

Runs the reference chats teacher-forced as one causal prefill each (prompt + greedy tokens) in
float32 over the dequantized weights, with optional emulations of llama.cpp's arithmetic, and
prints the max / mean |ours - reference| over the reference's top-5 logits.
Usage: python3 bench/parity_probe.py [flag ...]
  rope32  RoPE angles as ggml forms them: theta *= powf(base, -2/n) in float32
  kvf16   K, V (the cache), Q and the softmax weights rounded to fp16, as ggml's f16 KQ / KQV matmuls do
  q8act   activations rounded to 8-bit blocks of 32 (fp16 scale) before every Q4_1 matmul (Q8_1)
  q8head  the same before the Q8_0 output head
  noise   instead: 10 runs of q8act+q8head+kvf16 with the block scale nudged by 1e-3*k, so each
          rounds differently; prints how far each lands from our exact forward (the noise envelope)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from services.modelstore.pull import pull
from services.modelstore.weight_cache import load_weights

REF = Path(__file__).parent.parent / "tests" / "data" / "smollm2-135m-q4_1.llamacpp.json"
F = np.float32


NUDGE = 0.0


def q8(x):
    """Round rows of x to Q8_0/Q8_1 blocks of 32 as ggml's quantize_row_q8_* does: d = amax/127 in fp16.

    (Q8_1's block sum term is left out: it moves a result by fp16 rounding of one number per block.)
    """
    t, n = x.shape
    b = x.reshape(t, n // 32, 32)
    d = np.abs(b).max(-1, keepdims=True) / F(127) * F(1 + NUDGE)
    inv = np.where(d > 0, F(1) / np.where(d > 0, d, F(1)), F(0))
    q = np.rint(b * inv)                                                  # AVX2: round half to even
    return (q * d.astype(np.float16).astype(F)).reshape(t, n)


def rope_tables(pos, n_rot, base, f32):
    if not f32:
        inv = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
        a = pos[:, None].astype(np.float64) * inv[None]
        return np.cos(a).astype(F), np.sin(a).astype(F)
    # ggml_rope_cache_init: theta_scale = powf(base, -2/n_dims); theta *= theta_scale per pair, in float.
    scale = F(base) ** F(-2.0 / n_rot)
    cos = np.empty((len(pos), n_rot // 2), F)
    sin = np.empty_like(cos)
    for r, p in enumerate(pos):
        theta = F(p)
        for i in range(n_rot // 2):
            cos[r, i], sin[r, i] = np.cos(theta), np.sin(theta)
            theta = F(theta * scale)
    return cos, sin


def rope(x, cos, sin):
    t, h, d = x.shape
    p = x.reshape(t, h, d // 2, 2)
    x0, x1 = p[..., 0], p[..., 1]
    c, s = cos[:, None], sin[:, None]
    return np.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(t, h, d)


def norm(x, w, eps):
    ms = (x * x).mean(-1, keepdims=True, dtype=F)
    return x * (F(1) / np.sqrt(ms + F(eps))) * w


def forward(cfg, w, tokens, flags):
    mm = (lambda x, m: q8(x) @ m.T) if "q8act" in flags else (lambda x, m: x @ m.T)
    kvr = (lambda a: a.astype(np.float16).astype(F)) if "kvf16" in flags else (lambda a: a)
    n = len(tokens)
    H, KV, Dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    nq, nk = H * Dh, KV * Dh
    cos, sin = rope_tables(np.arange(n), cfg.rope_dims, cfg.rope_base, "rope32" in flags)
    x = w.token_embd[np.asarray(tokens)].copy()
    mask = np.triu(np.full((n, n), -np.inf, F), 1)
    scale = F(1 / np.sqrt(Dh))
    for i in range(cfg.n_layers):
        h = norm(x, w.attn_norm[i], cfg.norm_eps)
        qkv = mm(h, w.wqkv[i])
        q = rope(qkv[:, :nq].reshape(n, H, Dh), cos, sin)
        k = kvr(rope(qkv[:, nq:nq + nk].reshape(n, KV, Dh), cos, sin))
        v = kvr(qkv[:, nq + nk:].reshape(n, KV, Dh))
        qg = kvr(q).reshape(n, KV, H // KV, Dh).transpose(1, 2, 0, 3)         # (KV, G, n, Dh)
        s = qg @ k.transpose(1, 2, 0)[:, None] * scale + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = kvr(p) @ v.transpose(1, 0, 2)[:, None]                              # (KV, G, n, Dh)
        x = x + mm(o.transpose(2, 0, 1, 3).reshape(n, nq), w.wo[i])
        h = norm(x, w.ffn_norm[i], cfg.norm_eps)
        gu = mm(h, w.w_gate_up[i])
        g, u = gu[:, :cfg.ffn_dim], gu[:, cfg.ffn_dim:]
        x = x + mm(g / (F(1) + np.exp(-g)) * u, w.w_down[i])
    h = norm(x, w.output_norm, cfg.norm_eps)
    return (q8(h) if "q8head" in flags else h) @ w.output.T


def top5(loaded, ref, flags):
    """Our logits at the reference's top-5 ids, (steps, 5) per chat."""
    out = []
    for chat in ref["chats"]:
        steps = chat["greedy_steps_top5"]
        toks = chat["prompt_ids"] + chat["greedy_ids"][:len(steps) - 1]
        lg = forward(loaded.config, loaded.weights, toks, flags)[len(chat["prompt_ids"]) - 1:]
        out.append(np.take_along_axis(lg, np.array([[t[0] for t in s] for s in steps]), 1))
    return out


def summary(a, b) -> str:
    d = [np.abs(x - y) for x, y in zip(a, b)]
    flat = np.concatenate([x.ravel() for x in d])
    c = int(np.argmax([x.max() for x in d]))
    step = np.unravel_index(d[c].argmax(), d[c].shape)[0]
    return (f"mean {flat.mean():.3f} max {flat.max():.2f} (chat {c} step {step}), >1.0: {(flat > 1).sum()}, "
            f"chat 0 step 10: {d[0][10].max():.2f}")


def main(flags):
    global NUDGE
    loaded = load_weights(pull(), 0, 30)
    ref = json.loads(REF.read_text())
    want = [np.array([[t[1] for t in s] for s in c["greedy_steps_top5"]]) for c in ref["chats"]]
    exact = top5(loaded, ref, [])
    if "noise" not in flags:
        print(f"{' '.join(flags) or 'exact fp32'} vs llama.cpp: {summary(top5(loaded, ref, flags), want)}")
        return
    print(f"exact fp32 vs llama.cpp: {summary(exact, want)}")
    for k in range(10):
        NUDGE = 1e-3 * k
        noisy = top5(loaded, ref, ["q8act", "q8head", "kvf16"])
        print(f"realization {k}: vs exact {summary(noisy, exact)} | vs llama.cpp {summary(noisy, want)}")


if __name__ == "__main__":
    main(sys.argv[1:])
