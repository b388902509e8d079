"""The tokenizer fields of a GGUF as a plain dataclass: what every other module here builds on."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

from services.tokenizer.errors import BadModelFile
from services.modelstore.gguf_meta import read_metadata


class TokenType(IntEnum):
    """GGUF `tokenizer.ggml.token_type` values (same numbers as llama.cpp's)."""

    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


@dataclass(frozen=True)
class Vocab:
    """Everything the GGUF says about its tokenizer; ids are plain ints, None where absent."""

    model: str                      # tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama" (SPM)
    pre: str                        # tokenizer.ggml.pre: pre-tokenizer name ("default" if absent)
    tokens: list[str]
    token_types: list[int]
    merges: list[str] = field(default_factory=list)    # "left right", BPE only
    scores: list[float] | None = None                   # SPM only
    bos_id: int | None = None
    eos_id: int | None = None
    eot_id: int | None = None
    eom_id: int | None = None
    unk_id: int | None = None
    pad_id: int | None = None
    add_bos: bool | None = None     # None: the GGUF does not say (defaults differ by model)
    add_eos: bool = False
    add_space_prefix: bool = False
    chat_template: str | None = None
    named_templates: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.tokens)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if n == 0:
            raise BadModelFile("the GGUF has an empty tokenizer.ggml.tokens")
        if len(self.token_types) != n:
            raise BadModelFile(f"token_type has {len(self.token_types)} entries for {n} tokens")
        if self.scores is not None and len(self.scores) != n:
            raise BadModelFile(f"scores has {len(self.scores)} entries for {n} tokens")
        for name in ("bos_id", "eos_id", "eot_id", "eom_id", "unk_id", "pad_id"):
            v = getattr(self, name)
            if v is not None and not 0 <= v < n:
                raise BadModelFile(f"{name} = {v} is outside the vocabulary of {n} tokens")


def load_vocab(path: str | Path) -> Vocab:
    """Read only the tokenizer metadata of a GGUF file (no tensors)."""
    return vocab_from_metadata(read_metadata(path))


def vocab_from_metadata(meta: dict[str, Any]) -> Vocab:
    """Build a Vocab from GGUF key/values, as gguf_meta.read_metadata returns them."""
    if "tokenizer.ggml.tokens" not in meta or "tokenizer.ggml.model" not in meta:
        raise BadModelFile("the GGUF carries no tokenizer (tokenizer.ggml.model / .tokens missing)")
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = meta.get("tokenizer.ggml.token_type")
    # A GGUF without token types treats every token as normal, as llama.cpp does.
    token_types = [int(t) for t in types] if types is not None else [TokenType.NORMAL] * len(tokens)
    scores = meta.get("tokenizer.ggml.scores")
    return Vocab(
        model=str(meta["tokenizer.ggml.model"]),
        pre=str(meta.get("tokenizer.ggml.pre", "default")),
        tokens=tokens,
        token_types=token_types,
        merges=list(meta.get("tokenizer.ggml.merges", [])),
        scores=np.asarray(scores, dtype=np.float32).tolist() if scores is not None else None,
        bos_id=_opt_int(meta, "tokenizer.ggml.bos_token_id"),
        eos_id=_opt_int(meta, "tokenizer.ggml.eos_token_id"),
        eot_id=_opt_int(meta, "tokenizer.ggml.eot_token_id"),
        eom_id=_opt_int(meta, "tokenizer.ggml.eom_token_id"),
        unk_id=_opt_int(meta, "tokenizer.ggml.unknown_token_id"),
        pad_id=_opt_int(meta, "tokenizer.ggml.padding_token_id"),
        add_bos=_opt_bool(meta, "tokenizer.ggml.add_bos_token"),
        add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        add_space_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix",
                                       meta["tokenizer.ggml.model"] == "llama")),
        chat_template=meta.get("tokenizer.chat_template"),
        named_templates={k.removeprefix("tokenizer.chat_template."): v for k, v in meta.items()
                         if k.startswith("tokenizer.chat_template.")},
    )


def _opt_int(meta: dict[str, Any], key: str) -> int | None:
    v = meta.get(key)
    # llama.cpp writes -1 (as uint32 0xFFFFFFFF) for "no such token".
    if v is None or int(v) in (-1, 0xFFFFFFFF):
        return None
    return int(v)


def _opt_bool(meta: dict[str, Any], key: str) -> bool | None:
    v = meta.get(key)
    return None if v is None else bool(v)
