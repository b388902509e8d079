"""Bad chat messages get a BadMessages that names the message and what is wrong."""

import pytest

from services.tokenizer.errors import BadMessages
from services.tokenizer.messages import normalize_messages


def test_text_parts_are_joined_and_other_fields_kept():
    out = normalize_messages([{"role": "user", "name": "ann", "content": [
        {"type": "text", "text": "first"}, {"type": "text", "text": "second"}]}])
    assert out == [{"role": "user", "name": "ann", "content": "first\nsecond"}]


def test_assistant_tool_call_without_content():
    msg = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}
    assert normalize_messages([msg])[0]["content"] == ""


def test_input_is_not_modified():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}]}]
    normalize_messages(msgs)
    assert msgs[0]["content"] == [{"type": "text", "text": "a"}]


@pytest.mark.parametrize("messages, index, fragment", [
    ([], None, "empty"),
    ("hello", None, "list of messages"),
    (None, None, "list of messages"),
    (["hi"], 0, "object"),
    ([{"content": "hi"}], 0, "unknown role None"),
    ([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}], 1, "'wizard'"),
    ([{"role": "user", "content": 42}], 0, "string or a list"),
    ([{"role": "user"}], 0, "missing"),
    ([{"role": "user", "content": None}], 0, "missing"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], 0, "'image_url'"),
    ([{"role": "user", "content": [{"type": "text", "text": 3}]}], 0, "text must be a string"),
    ([{"role": "user", "content": ["plain"]}], 0, "'str'"),
])
def test_bad_messages(messages, index, fragment):
    with pytest.raises(BadMessages, match=fragment) as e:
        normalize_messages(messages)
    assert e.value.index == index
