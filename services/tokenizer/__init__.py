"""Tokenizer core of llmbus: a GGUF's own vocabulary as a HF `tokenizers` tokenizer, token bytes,
UTF-8-safe streaming and chat templates. Pure: the bus service wraps a `Tokenizer`.

`Tokenizer` and `IncrementalDecoder` load on first use: `llmbus run` imports this package to
build its parser, and numpy must not load before a service has set its BLAS thread count.
"""

from services.tokenizer.errors import (BadMessages, BadModelFile, BadTokenId, TemplateError,
                                       TokenizerError, UnknownTemplate, UnsupportedTokenizer)

__all__ = [
    "Tokenizer", "IncrementalDecoder", "TokenizerError", "BadModelFile", "UnsupportedTokenizer",
    "BadTokenId", "BadMessages", "UnknownTemplate", "TemplateError",
]


def __getattr__(name: str):
    if name == "Tokenizer":
        from services.tokenizer.tokenizer import Tokenizer
        return Tokenizer
    if name == "IncrementalDecoder":
        from services.tokenizer.stream import IncrementalDecoder
        return IncrementalDecoder
    raise AttributeError(f"module 'services.tokenizer' has no attribute {name!r}")
