"""Each protocol's way to ask for structured output, read into the one form the scheduler
takes; a format we do not support is a 400 naming the field and the format."""

from __future__ import annotations

import pytest

from gateway.errors import BadRequest
from gateway.fields import Fields
from gateway.formats import anthropic_format, ollama_format, openai_format

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


@pytest.mark.parametrize("body, want", [
    ({}, None),
    ({"response_format": {"type": "text"}}, None),
    ({"response_format": {"type": "json_object"}}, {"type": "json_object"}),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "a", "schema": SCHEMA, "strict": True}}}, {"type": "json_schema", "schema": SCHEMA}),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}},
     {"type": "json_object"}),
])
def test_openai_response_format(body, want):
    assert openai_format(Fields(body)) == want


@pytest.mark.parametrize("body, want", [
    ({}, None),
    ({"output_config": {"effort": "low"}}, None),
    ({"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
     {"type": "json_schema", "schema": SCHEMA}),
    ({"output_format": {"type": "json_schema", "schema": SCHEMA}},
     {"type": "json_schema", "schema": SCHEMA}),
])
def test_anthropic_output_format(body, want):
    assert anthropic_format(Fields(body)) == want


@pytest.mark.parametrize("body, want", [
    ({}, None), ({"format": ""}, None), ({"format": "json"}, {"type": "json_object"}),
    ({"format": SCHEMA}, {"type": "json_schema", "schema": SCHEMA}),
])
def test_ollama_format(body, want):
    assert ollama_format(Fields(body)) == want


@pytest.mark.parametrize("read, body, param, words", [
    (openai_format, {"response_format": {"type": "xml"}}, "response_format.type", "'xml'"),
    (openai_format, {"response_format": "json"}, "response_format", "object"),
    (openai_format, {"response_format": {}}, "response_format.type", "required"),
    (openai_format, {"response_format": {"type": "json_schema", "json_schema": {
        "name": "a", "schema": "{}"}}}, "response_format.json_schema.schema", "schema"),
    (anthropic_format, {"output_config": {"format": {"type": "text"}}},
     "output_config.format.type", "'text'"),
    (anthropic_format, {"output_format": {"type": "json_schema"}}, "output_format.schema",
     "required"),
    (ollama_format, {"format": "xml"}, "format", "'xml'"),
    (ollama_format, {"format": 3}, "format", "schema"),
])
def test_an_unsupported_format_is_a_400_naming_it(read, body, param, words):
    with pytest.raises(BadRequest) as e:
        read(Fields(body))
    assert e.value.status == 400 and e.value.param == param and words in e.value.message


def test_tools_left_to_the_model_hold_each_call_from_its_opening_strict_or_not():
    from gateway.tools import anthropic_tools, openai_tools
    fn = {"name": "f", "parameters": SCHEMA}
    for strict in (True, False, None):
        tools = openai_tools(Fields({"tools": [{"type": "function", "function": {
            **fn, "strict": strict}}]}))
        assert tools.force is None and "strict" not in tools.functions[0]["function"]
        assert '%json {"type":"object"' in tools.call_grammar
    ant = anthropic_tools(Fields({"tools": [{"name": "f", "input_schema": SCHEMA}]}))
    assert ant.force is None and ant.call_grammar == tools.call_grammar
    with pytest.raises(BadRequest, match="strict must be a boolean") as e:
        openai_tools(Fields({"tools": [{"type": "function", "function": {**fn, "strict": "yes"}}]}))
    assert e.value.param == "tools[0].function.strict"
