"""Tokenizer core of llmbus: a GGUF's own vocabulary as a HF `tokenizers` tokenizer, token bytes,
UTF-8-safe streaming and chat templates. Pure: the bus service wraps a `Tokenizer`."""

from services.tokenizer.errors import (BadMessages, BadModelFile, BadTokenId, TemplateError,
                                       TokenizerError, UnknownTemplate, UnsupportedTokenizer)
from services.tokenizer.stream import IncrementalDecoder
from services.tokenizer.tokenizer import Tokenizer

__all__ = [
    "Tokenizer", "IncrementalDecoder", "TokenizerError", "BadModelFile", "UnsupportedTokenizer",
    "BadTokenId", "BadMessages", "UnknownTemplate", "TemplateError",
]
