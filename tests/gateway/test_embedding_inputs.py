"""An embedding request's `input` as the gateway reads it, and its inputs cut into parts that
each fit one message to the scheduler (a RAG ingest of 2048 chunks is megabytes of text, a
message header at most 1 MiB)."""

from __future__ import annotations

import pytest

from gateway.embeddings import MAX_ID, parts, read_input
from gateway.errors import BadRequest
from wire import limits


def test_inputs_of_every_shape_openai_takes():
    assert read_input("a") == (["a"], [])
    assert read_input(["a", "b"]) == (["a", "b"], [])
    assert read_input([1, 2]) == ([], [[1, 2]])
    assert read_input([[1], [2, 3]]) == ([], [[1], [2, 3]])


@pytest.mark.parametrize("value, param", [
    ([], "input"), ("", "input[0]"), (["a", ""], "input[1]"), ([1, "a"], "input"),
    ([[1], []], "input[1]"), ([[1], [-1]], "input[1]"), ([[MAX_ID + 1]], "input[0]"),
    ([True], "input"), ({"a": 1}, "input"), (None, "input"), (["a"] * 2049, "input"),
])
def test_bad_inputs_name_the_field(value, param):
    with pytest.raises(BadRequest) as info:
        read_input(value)
    assert info.value.param == param


def test_ollama_takes_no_token_ids():
    with pytest.raises(BadRequest):
        read_input([1, 2], token_ids=False)


def test_parts_keep_order_and_fit_a_header():
    texts = [f"{i} " + "x" * 1000 for i in range(2048)]          # 2 MB of text
    got = parts(texts, [])
    assert [t for p in got for t in p["inputs"]] == texts and len(got) > 1
    assert all(sum(len(t) for t in p["inputs"]) < limits.MAX_HEADER_BYTES // 2 for p in got)
    assert parts(["a", "b"], []) == [{"inputs": ["a", "b"]}]
    ids = [[7] * 60_000 for _ in range(4)]
    assert [i for p in parts([], ids) for i in p["input_ids"]] == ids
    assert parts(["y" * (1 << 19)], []) == [{"inputs": ["y" * (1 << 19)]}]   # alone, as it is
