"""How llama.cpp splits text before BPE, per GGUF `tokenizer.ggml.pre` name.

Each spec is llama.cpp's list of regexes, applied one after another: every regex cuts each
piece left by the previous ones into its matches and the text between them. That is a
`tokenizers` Split(behavior="isolated") per regex. The regexes are the original ones from the
models' tokenizer.json (HF tokenizers runs Oniguruma, which has the \\p{..} classes and
look-arounds llama.cpp had to rewrite by hand).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.tokenizer.errors import UnsupportedTokenizer

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizerSpec:
    """Regexes to split with, and the llama.cpp vocabulary flags that come with the pre type."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False     # a word that is itself a token is taken whole (llama3)
    add_bos_default: bool = False   # llama.cpp's add_bos when the GGUF does not say


_DEFAULT = PreTokenizerSpec((r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))
_SPECS: dict[tuple[str, ...], PreTokenizerSpec] = {
    ("default",): _DEFAULT,
    ("gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "trillion", "granite-docling",
     "gigachat", "mellum", "a.x-4.0", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de"):
        PreTokenizerSpec((GPT2,)),
    # Digits one by one, then GPT-2: the same as HF SmolLM2's Digits + ByteLevel pre-tokenizer.
    ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"):
        PreTokenizerSpec((r"\p{N}", GPT2)),
    ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"):
        PreTokenizerSpec((LLAMA3,), ignore_merges=True, add_bos_default=True),
    ("dbrx", "smaug-bpe"): PreTokenizerSpec((LLAMA3,)),
    ("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"): PreTokenizerSpec((QWEN2,)),
    ("gpt-4o", "llama4"): PreTokenizerSpec((GPT4O,)),
    ("falcon",): PreTokenizerSpec((r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]")),
}
PRE_TOKENIZERS: dict[str, PreTokenizerSpec] = {n: s for names, s in _SPECS.items() for n in names}


def pre_tokenizer_spec(name: str) -> PreTokenizerSpec:
    """The spec for a GGUF pre-tokenizer name; an empty name means llama.cpp's 'default'."""
    spec = PRE_TOKENIZERS.get(name or "default")
    if spec is None:
        raise UnsupportedTokenizer("pre-tokenizer", name, list(PRE_TOKENIZERS))
    return spec
