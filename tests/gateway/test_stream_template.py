"""Text chunks written from a template are the bytes the whole object would encode to."""

from __future__ import annotations

from hypothesis import given, strategies as st

from gateway.stream import SseTemplate, sse


def chunk(text: str, index: int = 0) -> dict:
    return {"id": "chatcmpl-1", "created": 1, "model": "m \"q\" é", "object": "chat.completion.chunk",
            "choices": [{"index": index, "delta": {"content": text}, "logprobs": None,
                         "finish_reason": None}], "usage": None}


def put(c: dict, text: str) -> None:
    c["choices"][0]["delta"]["content"] = text


@given(st.text(), st.integers(0, 15))
def test_template_chunks_equal_the_encoded_object(text, index):
    assert SseTemplate(chunk("", index), put)(text) == sse(chunk(text, index))
