"""The real SmolLM2 tokenizer gives exactly llama.cpp's ids, prompts and token bytes."""

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

pytestmark = pytest.mark.slow


def _cases(reference, parse_special):
    return [c for c in reference["tokenize"] if c["parse_special"] is parse_special]


@pytest.mark.parametrize("parse_special", [True, False])
def test_tokenize_matches_llama_cpp(smollm, reference, parse_special):
    cases = _cases(reference, parse_special)
    assert cases
    for case in cases:
        assert smollm.encode(case["text"], parse_special=parse_special) == case["ids"], case["text"]


def test_reference_ids_carry_no_bos_and_gguf_does_not_ask_for_one(smollm, reference):
    # The GGUF says add_bos_token = false; llama.cpp's ids start with the text's first token.
    assert smollm.add_bos_default is False
    assert reference["tokenize"][0]["ids"][0] != smollm.bos_id
    assert smollm.encode("Hello, world!", add_special=True) == reference["tokenize"][0]["ids"]
    assert smollm.encode("Hello, world!", add_bos=True)[0] == smollm.bos_id == 1


def test_special_tokens_are_text_unless_parsed(smollm):
    assert smollm.encode("<|im_end|>", parse_special=True) == [2]
    assert 2 not in smollm.encode("<|im_end|>", parse_special=False)


def test_decode_inverts_encode_on_reference_texts(smollm, reference):
    for case in reference["tokenize"]:
        assert smollm.decode(case["ids"]) == case["text"]


def test_chat_prompts_render_and_tokenize_as_llama_cpp(smollm, reference):
    assert reference["chats"]
    for chat in reference["chats"]:
        assert smollm.render_chat(chat["messages"]) == chat["prompt"]
        assert smollm.encode_chat(chat["messages"]) == chat["prompt_ids"]


def test_token_bytes_match_llama_cpp_pieces(smollm, reference):
    for chat in reference["chats"]:
        pieces = [smollm.token_bytes[i].hex() for i in chat["greedy_ids"]]
        assert pieces == chat["greedy_token_bytes"]
        assert smollm.decode(chat["greedy_ids"], skip_special=True) == chat["greedy_text"]


def test_special_tokens_decode_to_text_only_when_asked(smollm):
    ids = smollm.encode("Paris.<|im_end|>", parse_special=True)
    assert ids[-1] == 2
    assert smollm.decode(ids) == "Paris.<|im_end|>"
    assert smollm.decode(ids, skip_special=True) == "Paris."
    assert smollm.stream().push_many(ids) == "Paris."
    assert smollm.stream(skip_special=False).push_many(ids) == "Paris.<|im_end|>"


def test_model_facts(smollm):
    assert smollm.vocab_size == 49152 == len(smollm.token_bytes)
    assert (smollm.bos_id, smollm.eos_id) == (1, 2)
    # <|im_end|> ends a turn (it is EOS here) and so does <|endoftext|>.
    assert smollm.eot_ids == {0, 2}
    assert smollm.templates.default_name == "gguf"


TEXT = "Unicode: café, naïve, 東京, emoji 🚀🙂, Ελληνικά."


def test_streaming_never_splits_a_character(smollm):
    ids = smollm.encode(TEXT)
    dec = smollm.stream()
    pieces = [dec.push(i) for i in ids] + [dec.flush()]
    # Some tokens end inside a character: they must emit nothing rather than half of it.
    assert any(p == "" for p in pieces[:-1])
    for p in pieces:
        assert "\ufffd" not in p
        p.encode("utf-8")  # every piece is well-formed (no lone surrogates)
    assert "".join(pieces) == TEXT


def test_bytes_missing_from_the_vocabulary_are_dropped(smollm):
    # SmolLM2 has no token for 21 bytes (e.g. 0x04, 0xF1); llama.cpp drops them as we do.
    assert smollm.encode("a\x04b") == smollm.encode("a") + smollm.encode("b")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(blacklist_categories=["Cs"]), max_size=60))
def test_any_text_round_trips_and_streams(smollm, text):
    spellable = {b for i, b in enumerate(smollm.token_bytes) if len(b) == 1}
    assume(all(bytes([b]) in spellable for b in text.encode("utf-8")))
    ids = smollm.encode(text)
    assert smollm.decode(ids) == text
    dec = smollm.stream()
    assert "".join(dec.push(i) for i in ids) + dec.flush() == text
