"""Build a HuggingFace `tokenizers` object from a GGUF vocabulary (byte-level BPE or SentencePiece).

The merge loop, the regex splitting and the special-token matching all run in the Rust library;
this module only translates the GGUF fields into its models, as HF's own converters do.
"""

from __future__ import annotations

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from services.tokenizer.errors import BadModelFile, UnsupportedTokenizer
from services.tokenizer.pretokenize import PreTokenizerSpec
from services.tokenizer.token_bytes import SPM_SPACE
from services.tokenizer.vocab import TokenType, Vocab

SUPPORTED_MODELS = ["gpt2", "llama"]
# Tokens that parse_special=False leaves as plain text, as llama.cpp's tokenizer_st_partition does;
# user-defined tokens are always matched whole.
SPECIAL_TYPES = (TokenType.CONTROL, TokenType.UNKNOWN)
ADDED_TYPES = (TokenType.CONTROL, TokenType.UNKNOWN, TokenType.USER_DEFINED)


def build_tokenizer(vocab: Vocab, spec: PreTokenizerSpec | None) -> Tokenizer:
    """A `tokenizers.Tokenizer` that encodes as llama.cpp does for this vocabulary."""
    if vocab.model == "gpt2":
        if spec is None:
            raise ValueError("a byte-level BPE vocabulary needs a pre-tokenizer spec")
        tok = _byte_level_bpe(vocab, spec)
    elif vocab.model == "llama":
        tok = _sentencepiece_bpe(vocab)
    else:
        raise UnsupportedTokenizer("tokenizer model", vocab.model, SUPPORTED_MODELS)
    _add_special_tokens(tok, vocab)
    return tok


def _token_ids(vocab: Vocab) -> dict[str, int]:
    # On duplicate texts the last id wins, as in llama.cpp's token_to_id map.
    return {t: i for i, t in enumerate(vocab.tokens)}


def _byte_level_bpe(vocab: Vocab, spec: PreTokenizerSpec) -> Tokenizer:
    merges = []
    for m in vocab.merges:
        # llama.cpp splits at the first space after the first char (a left part may be " ").
        cut = m.find(" ", 1)
        if cut < 0:
            raise BadModelFile(f"BPE merge {m!r} has no space between its two parts")
        merges.append((m[:cut], m[cut + 1:]))
    model = models.BPE(_token_ids(vocab), merges, ignore_merges=spec.ignore_merges)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in spec.regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece_bpe(vocab: Vocab) -> Tokenizer:
    if vocab.scores is None:
        raise BadModelFile("a SentencePiece ('llama') vocabulary needs tokenizer.ggml.scores")
    ids = _token_ids(vocab)
    unk = vocab.tokens[vocab.unk_id] if vocab.unk_id is not None else None
    model = models.BPE(ids, spm_merges(vocab), unk_token=unk, fuse_unk=True, byte_fallback=True)
    tok = Tokenizer(model)
    steps = [normalizers.Replace(" ", SPM_SPACE)]
    if vocab.add_space_prefix:
        # Prepend runs on each text piece between special tokens: llama.cpp also adds the
        # space prefix at the start and after every special token.
        steps.insert(0, normalizers.Prepend(SPM_SPACE))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = decoders.Sequence([decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    return tok


def spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Merges that rebuild SentencePiece's greedy best-score-first joining, as HF's converter does.

    Every split of a token into two tokens is a merge, ranked by the score of the joined token
    (higher first); llama.cpp's SPM tokenizer joins adjacent pieces in that same order.
    """
    assert vocab.scores is not None
    ids = _token_ids(vocab)
    mergeable = {t for t, k in zip(vocab.tokens, vocab.token_types)
                 if k in (TokenType.NORMAL, TokenType.USER_DEFINED)}
    ranked = []
    for i, (piece, kind) in enumerate(zip(vocab.tokens, vocab.token_types)):
        if kind != TokenType.NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in mergeable and right in mergeable:
                ranked.append((-vocab.scores[i], ids[left], ids[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _add_special_tokens(tok: Tokenizer, vocab: Vocab) -> None:
    special, plain = [], []
    for text, kind in zip(vocab.tokens, vocab.token_types):
        if kind in SPECIAL_TYPES:
            special.append(AddedToken(text, special=True, normalized=False))
        elif kind == TokenType.USER_DEFINED:
            plain.append(AddedToken(text, special=False, normalized=False))
    if special:
        tok.add_special_tokens(special)
    if plain:
        tok.add_tokens(plain)
