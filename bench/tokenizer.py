"""Tokenizer load time and encode/decode speed: `python3 bench/tokenizer.py [GGUF]`."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from services.tokenizer.tokenizer import Tokenizer
from services.tokenizer.vocab import load_vocab

DEFAULT = Path.home() / ".cache/llmbus/models/SmolLM2-135M-Instruct.Q4_1.gguf"
PARAGRAPH = ("The quick brown fox jumps over the lazy dog near 東京, café and naïve 🚀. "
             "def fib(n): return n if n < 2 else fib(n-1) + fib(n-2)\n")


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(path: Path) -> None:
    t_vocab = _best(lambda: load_vocab(path), 3)
    t_load = _best(lambda: Tokenizer.from_gguf(path), 3)
    tok = Tokenizer.from_gguf(path)
    text = PARAGRAPH
    while len(tok.encode(text)) < 1000:
        text += PARAGRAPH
    n = len(tok.encode(text))
    t_enc = _best(lambda: tok.encode(text, parse_special=True), 20)
    big = text * 100
    n_big = len(tok.encode(big))
    t_big = _best(lambda: tok.encode(big), 3)
    ids = tok.encode(big)
    t_dec = _best(lambda: tok.decode(ids), 3)

    def stream():
        dec = tok.stream()
        for i in ids:
            dec.push(i)
    t_stream = _best(stream, 3)
    print(f"vocab read (metadata only): {t_vocab * 1e3:7.1f} ms  ({tok.vocab_size} tokens)")
    print(f"Tokenizer.from_gguf:        {t_load * 1e3:7.1f} ms")
    print(f"encode {n}-token prompt:   {t_enc * 1e3:7.2f} ms")
    print(f"encode throughput:          {n_big / t_big / 1e6:7.2f} M tokens/s ({n_big} tokens)")
    print(f"decode throughput:          {n_big / t_dec / 1e6:7.2f} M tokens/s")
    print(f"stream decode:              {n_big / t_stream / 1e6:7.2f} M tokens/s (one push per token)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
