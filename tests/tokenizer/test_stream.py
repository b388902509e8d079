"""IncrementalDecoder: complete UTF-8 text per token, partial characters held, bad bytes replaced."""

from hypothesis import given, strategies as st

import pytest

from services.tokenizer.errors import BadTokenId
from services.tokenizer.stream import IncrementalDecoder

ROCKET = "🚀".encode()  # 4 bytes: f0 9f 9a 80


def test_holds_back_a_character_split_over_tokens():
    table = [ROCKET[:1], ROCKET[1:3], ROCKET[3:], b"ok"]
    dec = IncrementalDecoder(table)
    assert [dec.push(0), dec.push(1)] == ["", ""]
    assert dec.pending == ROCKET[:3]
    assert dec.push(2) == "🚀"
    assert dec.push(3) == "ok"
    assert dec.flush() == ""


def test_invalid_bytes_become_replacement_chars():
    dec = IncrementalDecoder([b"\xff", b"a", b"\xe6\x9d"])
    assert dec.push(0) == "\ufffd"
    assert dec.push(1) == "a"
    assert dec.push(2) == ""          # start of a 3-byte char: held back
    assert dec.push(1) == "\ufffda"   # the char was cut short by "a"


def test_flush_replaces_a_truncated_tail_and_resets():
    dec = IncrementalDecoder([ROCKET[:2], b"x"])
    assert dec.push(0) == ""
    assert dec.flush() == "\ufffd"
    assert dec.push(1) == "x"


@pytest.mark.parametrize("bad", [-1, 2, "1", 1.0])
def test_rejects_ids_outside_the_table(bad):
    with pytest.raises(BadTokenId):
        IncrementalDecoder([b"a", b"b"]).push(bad)


@given(st.text(), st.lists(st.integers(1, 6)))
def test_any_byte_cut_gives_back_the_text(text, cuts):
    data = text.encode("utf-8")
    chunks, pos = [], 0
    for c in cuts:
        chunks.append(data[pos:pos + c])
        pos += c
    chunks.append(data[pos:])
    dec = IncrementalDecoder(chunks)
    pieces = [dec.push(i) for i in range(len(chunks))] + [dec.flush()]
    assert "".join(pieces) == text
