"""Loading: the metadata reader agrees with gguf's reader; bad files and models get typed errors."""

import numpy as np
import pytest
from gguf import GGUFReader

from services.tokenizer.errors import BadModelFile, UnsupportedTokenizer
from services.modelstore.gguf_meta import read_metadata
from services.tokenizer.tokenizer import Tokenizer
from services.tokenizer.vocab import load_vocab

from .conftest import tiny_bpe_kv, write_gguf


def test_metadata_reader_agrees_with_gguf_reader(spm_gguf):
    ours = read_metadata(spm_gguf)
    theirs = GGUFReader(spm_gguf).fields
    for key, field in theirs.items():
        if key.startswith("GGUF."):
            continue  # the reader's own pseudo-fields (version, counts)
        want = field.contents()
        got = ours[key]
        if isinstance(got, np.ndarray):
            np.testing.assert_array_equal(got, np.asarray(want))
        else:
            assert got == want, key


@pytest.mark.slow
def test_metadata_reader_on_the_real_model(model_path):
    vocab = load_vocab(model_path)
    fields = GGUFReader(model_path).fields
    assert vocab.tokens == fields["tokenizer.ggml.tokens"].contents()
    assert vocab.merges == fields["tokenizer.ggml.merges"].contents()
    assert vocab.token_types == fields["tokenizer.ggml.token_type"].contents()
    assert (vocab.model, vocab.pre) == ("gpt2", "smollm")


def test_byte_level_bpe_on_a_tiny_vocabulary(bpe_gguf):
    tok = Tokenizer.from_gguf(bpe_gguf)
    ids = tok.encode("hello world")
    assert [tok.vocab.tokens[i] for i in ids] == ["hello", "Ġworld"]
    assert tok.token_bytes[ids[1]] == b" world"
    text = "hello world<|endoftext|> 東京 🚀"
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, parse_special=True)) == text


def test_control_tokens_need_parse_special_but_user_defined_do_not(bpe_gguf):
    tok = Tokenizer.from_gguf(bpe_gguf)
    assert 0 in tok.encode("x<|endoftext|>", parse_special=True)
    assert 0 not in tok.encode("x<|endoftext|>", parse_special=False)
    tool = tok.vocab.tokens.index("<tool>")
    assert tool in tok.encode("x<tool>", parse_special=False)
    assert tok.token_bytes[tool] == b"<tool>"  # user-defined tokens always read as their text


def test_unknown_tokenizer_model_is_refused_by_name(tmp_path):
    path = write_gguf(tmp_path / "bert.gguf", tiny_bpe_kv(add_tokenizer_model="bert"))
    with pytest.raises(UnsupportedTokenizer, match="'bert'") as e:
        Tokenizer.from_gguf(path)
    assert e.value.name == "bert" and "gpt2" in e.value.supported


def test_unknown_pre_tokenizer_is_refused_by_name(tmp_path):
    path = write_gguf(tmp_path / "pre.gguf", tiny_bpe_kv(add_tokenizer_pre="no-such-pre"))
    with pytest.raises(UnsupportedTokenizer, match="no-such-pre"):
        Tokenizer.from_gguf(path)


def test_not_a_gguf(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"PK\x03\x04 not a gguf at all")
    with pytest.raises(BadModelFile, match="magic"):
        Tokenizer.from_gguf(path)


def test_truncated_gguf(bpe_gguf):
    data = bpe_gguf.read_bytes()
    bpe_gguf.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadModelFile, match="past the end"):
        Tokenizer.from_gguf(bpe_gguf)


def test_missing_file(tmp_path):
    with pytest.raises(BadModelFile):
        Tokenizer.from_gguf(tmp_path / "absent.gguf")


def test_gguf_without_tokenizer(tmp_path):
    path = write_gguf(tmp_path / "bare.gguf", {"add_name": "no tokenizer here"})
    with pytest.raises(BadModelFile, match="no tokenizer"):
        Tokenizer.from_gguf(path)


def test_token_types_must_match_tokens(tmp_path):
    path = write_gguf(tmp_path / "bad.gguf", tiny_bpe_kv(add_token_types=[1, 1, 1]))
    with pytest.raises(BadModelFile, match="token_type"):
        Tokenizer.from_gguf(path)


def test_out_of_range_special_id(tmp_path):
    path = write_gguf(tmp_path / "bad.gguf", tiny_bpe_kv(add_eos_token_id=10**6))
    with pytest.raises(BadModelFile, match="eos_id"):
        Tokenizer.from_gguf(path)


def test_bad_inputs_to_encode_and_decode(bpe_gguf):
    from services.tokenizer.errors import BadTokenId, TokenizerError
    tok = Tokenizer.from_gguf(bpe_gguf)
    with pytest.raises(TokenizerError, match="string"):
        tok.encode(b"bytes")
    with pytest.raises(BadTokenId):
        tok.decode([0, tok.vocab_size])
    with pytest.raises(BadTokenId):
        tok.decode([-1])
    with pytest.raises(BadTokenId):
        tok.stream().push(tok.vocab_size)
