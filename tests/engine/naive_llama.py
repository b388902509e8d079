"""A deliberately plain llama forward (float64, no paging, no fusion) to check the engine against;
keys and values rounded to float16 where a KV cache stores them, as llama.cpp's default cache does,
and q as its flash attention takes it, to the keys' type.

It reads the GGUF on its own (GGUFReader + dequantize) so that a layout mistake in
services.modelstore.weights cannot hide in both.
"""

from __future__ import annotations

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def load(path):
    r = GGUFReader(str(path))
    t = {x.name: dequantize(x.data, x.tensor_type).reshape([int(n) for n in reversed(x.shape)]).astype(np.float64)
         for x in r.tensors}
    meta = {k: f.contents() for k, f in r.fields.items() if k.startswith("llama.")}
    return t, meta


def logits(path, tokens):
    """Logits (len(tokens), vocab) of a whole sequence starting at position 0."""
    t, m = load(path)
    n_layers, n_heads = m["llama.block_count"], m["llama.attention.head_count"]
    n_kv, eps, base = m["llama.attention.head_count_kv"], m["llama.attention.layer_norm_rms_epsilon"], m["llama.rope.freq_base"]
    x = t["token_embd.weight"][tokens]
    n, d = x.shape
    hd = d // n_heads

    def norm(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    def rope(v):  # v (n, heads, hd); pairs (2i, 2i+1) turn by pos * base^(-2i/hd)
        out = v.copy()
        for p in range(n):
            for i in range(hd // 2):
                a = p * base ** (-2 * i / hd)
                x0, x1 = v[p, :, 2 * i], v[p, :, 2 * i + 1]
                out[p, :, 2 * i] = x0 * np.cos(a) - x1 * np.sin(a)
                out[p, :, 2 * i + 1] = x0 * np.sin(a) + x1 * np.cos(a)
        return out

    for layer in range(n_layers):
        w = {k[len(f"blk.{layer}."):]: v for k, v in t.items() if k.startswith(f"blk.{layer}.")}
        h = norm(x, w["attn_norm.weight"])
        q = rope((h @ w["attn_q.weight"].T).reshape(n, n_heads, hd))
        k = rope((h @ w["attn_k.weight"].T).reshape(n, n_kv, hd))
        v = (h @ w["attn_v.weight"].T).reshape(n, n_kv, hd)
        q, k, v = (a.astype(np.float16).astype(np.float64) for a in (q, k, v))
        att = np.zeros((n, n_heads, hd))
        for head in range(n_heads):
            kvh = head // (n_heads // n_kv)
            for i in range(n):
                s = k[: i + 1, kvh] @ q[i, head] / np.sqrt(hd)
                p = np.exp(s - s.max())
                att[i, head] = (p / p.sum()) @ v[: i + 1, kvh]
        x = x + att.reshape(n, d) @ w["attn_output.weight"].T
        h = norm(x, w["ffn_norm.weight"])
        g, u = h @ w["ffn_gate.weight"].T, h @ w["ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w["ffn_down.weight"].T
    head = t.get("output.weight", t["token_embd.weight"])
    return norm(x, t["output_norm.weight"]) @ head.T
