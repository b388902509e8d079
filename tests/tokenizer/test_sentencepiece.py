"""A SentencePiece ('llama') vocabulary written to a tiny GGUF: encode, byte fallback, round trip."""

from hypothesis import given, settings, strategies as st

from services.tokenizer.tokenizer import Tokenizer


def pieces(tok, ids):
    return [tok.vocab.tokens[i] for i in ids]


def test_merges_follow_scores(spm_gguf):
    tok = Tokenizer.from_gguf(spm_gguf)
    assert pieces(tok, tok.encode("hello world")) == ["▁hello", "▁world"]
    assert tok.decode(tok.encode("hello world")) == "hello world"


def test_unknown_chars_fall_back_to_byte_tokens(spm_gguf):
    tok = Tokenizer.from_gguf(spm_gguf)
    ids = tok.encode("héllo")
    assert pieces(tok, ids) == ["▁h", "<0xC3>", "<0xA9>", "ll", "o"]
    assert tok.token_bytes[ids[1]] == b"\xc3"
    assert tok.decode(ids) == "héllo"


def test_bos_by_default_and_specials_when_parsed(spm_gguf):
    tok = Tokenizer.from_gguf(spm_gguf)
    assert tok.add_bos_default is True  # llama.cpp's default for SPM when the GGUF is silent
    ids = tok.encode("hello</s>", parse_special=True, add_special=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id == 2
    assert 2 not in tok.encode("hello</s>")
    assert tok.decode(ids, skip_special=True) == "hello"
    assert tok.decode(ids) == "<s> hello</s>"


def test_user_defined_tokens_are_always_matched(spm_gguf):
    tok = Tokenizer.from_gguf(spm_gguf)
    tool = tok.vocab.tokens.index("<tool>")
    assert tool in tok.encode("hello<tool>", parse_special=False)


def test_token_bytes_spell_spaces_and_bytes(spm_gguf):
    tok = Tokenizer.from_gguf(spm_gguf)
    table = dict(zip(tok.vocab.tokens, tok.token_bytes))
    assert table["▁hello"] == b" hello"
    assert table["<0x0A>"] == b"\n"
    assert table["<s>"] == b""  # control tokens read as nothing unless asked


@settings(max_examples=50, deadline=None)
@given(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\u2581"),
               max_size=30))
def test_round_trip_any_text(spm_gguf_session, text):
    # A leading space is lost to the prefix-space strip, and a literal U+2581 reads back as a
    # space: both as in llama.cpp.
    text = text.lstrip(" ")
    tok = spm_gguf_session
    assert tok.decode(tok.encode(text)) == text


def test_chat_prompt_gets_exactly_one_bos(spm_gguf):
    tok = Tokenizer.from_gguf(spm_gguf)
    assert tok.templates.default_name is None  # no template in the file: a base model
    msgs = [{"role": "user", "content": "hello"}]
    ids = tok.encode_chat(msgs, template="chatml")  # ChatML writes no BOS: the GGUF's add_bos puts one
    assert ids[0] == tok.bos_id and ids.count(tok.bos_id) == 1
    ids = tok.encode_chat(msgs, template="mistral")  # the template writes <s> itself
    assert ids[0] == tok.bos_id and ids.count(tok.bos_id) == 1
    assert tok.decode(ids, skip_special=True) == "[INST] hello [/INST]"
