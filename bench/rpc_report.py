"""The text bench/rpc_compare.py prints for one delay, from its figures. Pure."""

from __future__ import annotations

import statistics

GiB, MiB = 1 << 30, 1 << 20


def summary(out: dict, concurrency: str = "1,8") -> str:
    lines = []
    link = out.get("link")
    if link:
        lines.append(f"link client -> first host: round trip {link['rtt_s'] * 1e3:.2f} ms, "
                     f"{link['bytes_per_s'] / 1e6:.0f} MB/s")
    starts = out.get("starts", {})
    for e, runs in starts.items():
        for s in runs:
            lines.append(f"start to first answer, {e} ({'cold' if s['cold'] else 'warm'}): "
                         f"{s['answer_s']:.1f} s; bytes over each host's link meanwhile (sent/received): "
                         + ", ".join(f"{h} {tx / MiB:.1f}/{rx / MiB:.1f} MiB"
                                     for h, (tx, rx) in s["link_bytes"].items()))
    engines = list(starts) or sorted({k.split("@")[0] for r in out["rounds"] for k in r})
    for c in map(int, concurrency.split(",")):
        rates = {e: [r[f"{e}@{c}"]["decode_tok_s"] for r in out["rounds"] if f"{e}@{c}" in r]
                 for e in engines}
        text = ", ".join(f"{e} {statistics.median(v):.2f}" for e, v in rates.items() if v)
        line = f"decode tok/s at concurrency {c} (median of {len(out['rounds'])} rounds): {text}"
        if {"llmbus", "llamacpp"} <= set(rates) and all(rates.values()):
            ratios = [a / b for a, b in zip(rates["llmbus"], rates["llamacpp"]) if b > 0]
            line += (f"; llmbus / llama.cpp per round {', '.join(f'{x:.2f}x' for x in ratios)}"
                     f" (median {statistics.median(ratios):.2f}x)")
        lines.append(line)
    for e, rows in out.get("memory", {}).items():
        lines.append(f"resident memory ({e}):")
        for label, m in rows.items():
            if "VmRSS" in m:
                want = m["held"] + m.get("kv", 0)
                lines.append(f"  {label:22} layers {m['layers'][0]:>2}:{m['layers'][1]:<2} RSS "
                             f"{m['VmRSS'] / MiB:7.0f} MiB (file-backed {m['RssFile'] / MiB:6.0f}, anon "
                             f"{m['RssAnon'] / MiB:5.0f}) against {m['held'] / MiB:6.0f} MiB of weights"
                             + (f" + {m['kv'] / MiB:.0f} MiB KV" if m.get("kv") else "")
                             + f": {m['VmRSS'] / want:.2f}x")
            else:
                peak = "?" if m["peak"] is None else f"{m['peak'] / GiB:.2f}"
                lines.append(f"  {label:22} peak {peak} GiB of its {m['limit'] / GiB:.2f} GiB limit, "
                             f"{m['oom_kills']} process(es) killed for memory")
    return "\n".join(lines)
