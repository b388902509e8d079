"""Fixtures: the real SmolLM2 tokenizer, its llama.cpp reference, and tiny GGUFs written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGUFWriter

from services.tokenizer.token_bytes import gpt2_byte_to_unicode
from services.tokenizer.tokenizer import Tokenizer
from services.tokenizer.vocab import TokenType

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "smollm2-135m-q4_1.llamacpp.json"


@pytest.fixture(scope="session")
def reference() -> dict:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def smollm(model_path) -> Tokenizer:
    return Tokenizer.from_gguf(model_path)


def write_gguf(path: Path, kv: dict) -> Path:
    """A GGUF with metadata only (no tensors), from {method of GGUFWriter: argument}."""
    w = GGUFWriter(str(path), arch="llama")
    for method, arg in kv.items():
        getattr(w, method)(arg)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# A SentencePiece vocabulary small enough to reason about by hand.
SPM_PIECES = [
    ("<unk>", 0.0, TokenType.UNKNOWN), ("<s>", 0.0, TokenType.CONTROL),
    ("</s>", 0.0, TokenType.CONTROL),
    *[(f"<0x{b:02X}>", 0.0, TokenType.BYTE) for b in range(256)],
    ("▁", -1.0, TokenType.NORMAL), ("h", -2.0, TokenType.NORMAL), ("e", -2.0, TokenType.NORMAL),
    ("l", -2.0, TokenType.NORMAL), ("o", -2.0, TokenType.NORMAL), ("w", -2.0, TokenType.NORMAL),
    ("r", -2.0, TokenType.NORMAL), ("d", -2.0, TokenType.NORMAL), ("ll", -3.0, TokenType.NORMAL),
    ("▁h", -4.0, TokenType.NORMAL), ("▁he", -5.0, TokenType.NORMAL),
    ("▁hell", -6.0, TokenType.NORMAL), ("▁hello", -7.0, TokenType.NORMAL),
    ("▁w", -4.0, TokenType.NORMAL), ("or", -4.5, TokenType.NORMAL),
    ("▁wor", -6.5, TokenType.NORMAL), ("▁world", -8.0, TokenType.NORMAL),
    ("ld", -4.6, TokenType.NORMAL), ("<tool>", 0.0, TokenType.USER_DEFINED),
]


SPM_KV = {
    "add_tokenizer_model": "llama",
    "add_token_list": [p for p, _, _ in SPM_PIECES],
    "add_token_scores": [s for _, s, _ in SPM_PIECES],
    "add_token_types": [int(k) for _, _, k in SPM_PIECES],
    "add_bos_token_id": 1, "add_eos_token_id": 2, "add_unk_token_id": 0,
}


@pytest.fixture
def spm_gguf(tmp_path) -> Path:
    return write_gguf(tmp_path / "spm.gguf", SPM_KV)


def tiny_bpe_kv(**overrides) -> dict:
    """A byte-level BPE vocabulary: the 256 byte chars, a few merges, one control and one
    user-defined token."""
    chars = [gpt2_byte_to_unicode()[b] for b in range(256)]
    merged = ["he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld"]
    tokens = ["<|endoftext|>", *chars, *merged, "<tool>"]
    types = [TokenType.CONTROL, *[TokenType.NORMAL] * (256 + len(merged)), TokenType.USER_DEFINED]
    kv = {
        "add_tokenizer_model": "gpt2", "add_tokenizer_pre": "gpt-2",
        "add_token_list": tokens, "add_token_types": [int(t) for t in types],
        "add_token_merges": ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d",
                             "Ġwor ld"],
        "add_bos_token_id": 0, "add_eos_token_id": 0,
    }
    kv.update(overrides)
    return kv


@pytest.fixture
def bpe_gguf(tmp_path) -> Path:
    return write_gguf(tmp_path / "bpe.gguf", tiny_bpe_kv())


@pytest.fixture(scope="session")
def spm_gguf_session(tmp_path_factory) -> Tokenizer:
    """The tiny SentencePiece tokenizer, built once (for hypothesis tests)."""
    return Tokenizer.from_gguf(write_gguf(tmp_path_factory.mktemp("spm") / "spm.gguf", SPM_KV))
