"""The baselines bench/gpu.py prints ours beside, on the same shapes with random float16 weights:
a plain PyTorch llama decode step (static KV cache, argmax) captured as one CUDA graph and replayed,
and Hugging Face transformers' model in eager mode for a prefill. Torch is a bench comparison only:
llmbus never imports it (a GPU machine usually has it)."""

from __future__ import annotations

import statistics


def graph_decode_ms(shape, batch: int, context: int, steps: int, warmup: int = 5) -> float:
    """Median ms of one replayed decode step of `batch` sequences past `context` tokens."""
    import torch
    import torch.nn.functional as F
    dev, dt = "cuda", torch.float16
    L, D, H, KVH, Dh, FF, V = (shape.n_layers, shape.d_model, shape.n_heads, shape.n_kv_heads, shape.head_dim,
                               shape.ffn_dim, shape.vocab)
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*size, scale):
        return torch.randn(*size, device=dev, dtype=dt, generator=g) * scale
    qkv_dim = (H + 2 * KVH) * Dh
    wqkv, wo = rnd(L, qkv_dim, D, scale=D ** -0.5), rnd(L, D, H * Dh, scale=(H * Dh) ** -0.5)
    wgu, wdown = rnd(L, 2 * FF, D, scale=D ** -0.5), rnd(L, D, FF, scale=FF ** -0.5)
    emb = rnd(V, D, scale=1.0)
    norms = torch.ones(2 * L + 1, D, device=dev, dtype=dt)
    ctx = context + warmup + steps + 1
    kc = torch.zeros(L, batch, KVH, ctx, Dh, device=dev, dtype=dt)
    vc = torch.zeros_like(kc)
    tokens = torch.zeros(batch, dtype=torch.long, device=dev)
    pos = torch.zeros((), dtype=torch.long, device=dev)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, Dh, 2, device=dev, dtype=torch.float32) / Dh))
    keys = torch.arange(ctx, device=dev)

    def rms(x, w):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt) * w

    def rope(x, cos, sin):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    def step():
        h = emb[tokens]                                                   # (B, D)
        ang = pos.float() * inv_freq
        cos, sin = ang.cos().to(dt), ang.sin().to(dt)
        mask = (keys <= pos).view(1, 1, 1, ctx)                           # (B, H, 1, ctx) by broadcast
        for layer in range(L):
            x = rms(h, norms[2 * layer])
            qkv = x @ wqkv[layer].T
            q = rope(qkv[:, :H * Dh].view(batch, H, Dh), cos, sin)
            k = rope(qkv[:, H * Dh:(H + KVH) * Dh].view(batch, KVH, Dh), cos, sin)
            v = qkv[:, (H + KVH) * Dh:].view(batch, KVH, Dh)
            kc[layer].index_copy_(2, pos.view(1), k.unsqueeze(2))
            vc[layer].index_copy_(2, pos.view(1), v.unsqueeze(2))
            att = F.scaled_dot_product_attention(q.unsqueeze(2), kc[layer], vc[layer], attn_mask=mask,
                                                 enable_gqa=True)            # (B, H, 1, Dh)
            h = h + att.reshape(batch, H * Dh) @ wo[layer].T
            gu = rms(h, norms[2 * layer + 1]) @ wgu[layer].T
            h = h + (F.silu(gu[:, :FF]) * gu[:, FF:]) @ wdown[layer].T
        return (rms(h, norms[-1]) @ emb.T).argmax(-1)

    with torch.no_grad():
        pos.fill_(context)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        times = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(warmup + steps):
            pos.fill_(context + i)
            tokens.copy_(out)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(end))
    del kc, vc, wqkv, wo, wgu, wdown, emb
    torch.cuda.empty_cache()
    return statistics.median(times)


def hf_prefill_tokens_per_s(shape, batch: int, length: int, reps: int = 3) -> float:
    """Hugging Face transformers' llama of this shape, float16, eager PyTorch: prompt tokens a second."""
    import time

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.d_model, intermediate_size=shape.ffn_dim,
                      num_hidden_layers=shape.n_layers, num_attention_heads=shape.n_heads,
                      num_key_value_heads=shape.n_kv_heads, head_dim=shape.head_dim,
                      max_position_embeddings=4096, tie_word_embeddings=True)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.float16).eval()
    ids = torch.randint(0, shape.vocab, (batch, length), device="cuda")
    times = []
    with torch.no_grad():
        for i in range(reps + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(ids)
            torch.cuda.synchronize()
            if i:
                times.append(time.perf_counter() - t0)
    del model
    torch.cuda.empty_cache()
    return batch * length / statistics.median(times)
