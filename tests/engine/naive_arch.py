"""A deliberately plain forward of every supported architecture (float64 but the float16 KV cache
llama.cpp keeps by default, no paging, no fusion, neox
RoPE applied as neox), written from the architectures' papers and llama.cpp's graphs, not from the
engine: it reads the GGUF on its own, so a layout or permutation mistake in the loader cannot hide.
"""

from __future__ import annotations

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

NEOX = ("qwen2", "qwen3", "gemma3", "phi3")


def _stored(a: np.ndarray) -> np.ndarray:
    """Keys and values as a KV cache holds them: float16, llama.cpp's default cache type; and q as its
    flash attention (its default) takes it, to the keys' type."""
    return a.astype(np.float16).astype(np.float64)


def _load(path):
    r = GGUFReader(str(path))
    t = {x.name: dequantize(x.data, x.tensor_type).reshape([int(n) for n in reversed(x.shape)]).astype(np.float64)
         for x in r.tensors}
    arch = r.fields["general.architecture"].contents()
    meta = {k[len(arch) + 1:]: f.contents() for k, f in r.fields.items() if k.startswith(arch + ".")}
    return arch, t, meta


def _angles(pos: np.ndarray, n_rot: int, base: float, meta: dict, freqs, local: bool) -> np.ndarray:
    """(n, n_rot/2) rotation angle of each pair at each position."""
    theta = base ** (-np.arange(0, n_rot, 2) / n_rot)
    if local:
        return pos[:, None] * theta[None, :]
    if freqs is not None:                                  # Llama 3: per-pair divisors
        theta = theta / freqs
    kind, factor = meta.get("rope.scaling.type", "linear"), meta.get("rope.scaling.factor", 0.0)
    scale = 1.0 if kind == "none" or not factor else 1.0 / factor
    scaled = theta * scale
    if kind == "yarn":                                     # YaRN (Peng et al. 2023): fast dims extrapolate
        ctx = meta["rope.scaling.original_context_length"]
        dim = lambda rot: n_rot * np.log(ctx / (rot * 2 * np.pi)) / (2 * np.log(base))   # noqa: E731
        low, high = max(0.0, np.floor(dim(32))), min(n_rot - 1.0, np.ceil(dim(1)))
        keep = 1 - np.clip((np.arange(n_rot // 2) - low) / max(0.001, high - low), 0, 1)
        scaled = scaled * (1 - keep) + theta * keep
    return pos[:, None] * scaled[None, :]


def _rope(v: np.ndarray, ang: np.ndarray, neox: bool, mscale: float) -> np.ndarray:
    """v (n, heads, hd) rotated: pairs (i, i + n_rot/2) when neox, else (2i, 2i+1)."""
    n_rot = 2 * ang.shape[1]
    out = v.copy()
    i0 = np.arange(n_rot // 2) if neox else np.arange(0, n_rot, 2)
    i1 = i0 + n_rot // 2 if neox else i0 + 1
    c, s = (np.cos(ang) * mscale)[:, None, :], (np.sin(ang) * mscale)[:, None, :]
    out[:, :, i0] = v[:, :, i0] * c - v[:, :, i1] * s
    out[:, :, i1] = v[:, :, i0] * s + v[:, :, i1] * c
    return out


def logits(path, tokens) -> np.ndarray:
    """Logits (len(tokens), vocab) of a whole sequence starting at position 0."""
    arch, t, m = _load(path)
    n_layers, n_heads = m["block_count"], m["attention.head_count"]
    n_kv, eps = m.get("attention.head_count_kv", n_heads), m["attention.layer_norm_rms_epsilon"]
    x = t["token_embd.weight"][tokens]
    n, d = x.shape
    hd = m.get("attention.key_length", d // n_heads)
    n_rot = m.get("rope.dimension_count", hd)
    window = m.get("attention.sliding_window", 0) if arch == "gemma3" else 0
    neox = arch in NEOX
    yarn = m.get("rope.scaling.type") == "yarn"
    mscale = 1 + 0.1 * np.log(m["rope.scaling.factor"]) if yarn else 1.0
    pos = np.arange(n, dtype=np.float64)
    if arch == "gemma3":
        x = x * np.sqrt(d)

    def norm(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    def act(g):
        if arch == "gemma3":
            return 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
        return g / (1 + np.exp(-g))

    for layer in range(n_layers):
        w = {k[len(f"blk.{layer}."):]: v for k, v in t.items() if k.startswith(f"blk.{layer}.")}
        local = bool(window) and layer % 6 < 5                     # gemma3: every 6th layer is global
        h = norm(x, w["attn_norm.weight"])
        if "attn_qkv.weight" in w:
            q, k, v = np.split(h @ w["attn_qkv.weight"].T, [n_heads * hd, (n_heads + n_kv) * hd], axis=1)
        else:
            q, k, v = (h @ w[f"attn_{p}.weight"].T + w.get(f"attn_{p}.bias", 0.0) for p in "qkv")
        q, k, v = q.reshape(n, n_heads, hd), k.reshape(n, n_kv, hd), v.reshape(n, n_kv, hd)
        if "attn_q_norm.weight" in w:
            q, k = norm(q, w["attn_q_norm.weight"]), norm(k, w["attn_k_norm.weight"])
        base = m.get("rope.freq_base_swa", 10000.0) if local else m.get("rope.freq_base", 10000.0)
        ang = _angles(pos, n_rot, base, m, t.get("rope_freqs.weight"), local)
        q, k = _rope(q, ang, neox, mscale), _rope(k, ang, neox, mscale)
        q, k, v = _stored(q), _stored(k), _stored(v)
        att = np.zeros((n, n_heads, hd))
        for head in range(n_heads):
            kvh = head // (n_heads // n_kv)
            for i in range(n):
                first = max(0, i - window + 1) if local else 0
                s = k[first: i + 1, kvh] @ q[i, head] / np.sqrt(hd)
                p = np.exp(s - s.max())
                att[i, head] = (p / p.sum()) @ v[first: i + 1, kvh]
        o = att.reshape(n, n_heads * hd) @ w["attn_output.weight"].T
        if "post_attention_norm.weight" in w:
            o = norm(o, w["post_attention_norm.weight"])
        x = x + o
        h = norm(x, w["ffn_norm.weight"])
        if "ffn_gate.weight" in w:
            g, u = h @ w["ffn_gate.weight"].T, h @ w["ffn_up.weight"].T
        else:                                                       # phi3: ffn_up holds gate | up
            g, u = np.split(h @ w["ffn_up.weight"].T, 2, axis=1)
        f = (act(g) * u) @ w["ffn_down.weight"].T
        if "post_ffw_norm.weight" in w:
            f = norm(f, w["post_ffw_norm.weight"])
        x = x + f
    head = t.get("output.weight", t["token_embd.weight"])
    out = norm(x, t["output_norm.weight"]) @ head.T
    cap = m.get("final_logit_softcapping", 0.0)
    return np.tanh(out / cap) * cap if cap else out
