"""A request's `format` (wire.messages.scheduler.Generate) as an llguidance grammar, pure.

    grammar_of({"type": "json_schema", "schema": {"type": "object"}})   # llguidance's JSON text

JSON comes out compact, as json.dumps writes it (", " between items, ": " after keys, no other
whitespace): what small models were trained on, and no room to pad an answer with blank lines
until it runs out of tokens. A schema's own "x-guidance" options override that.
"""

from __future__ import annotations

from typing import Any

from llguidance import LLMatcher

from .errors import BadFormat

FORMATS = ("json_object", "json_schema", "lark")
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def grammar_of(fmt: Any) -> str:
    """The llguidance grammar (its JSON text) for a request's `format`; BadFormat names what is
    wrong. Whether the grammar compiles is the matcher's to say (`Grammars.compile`)."""
    if not isinstance(fmt, dict):
        raise BadFormat(f"format must be an object, not {type(fmt).__name__}")
    kind = fmt.get("type")
    if kind == "json_object":
        return _json({"type": "object"})
    if kind == "json_schema":
        schema = fmt.get("schema")
        if isinstance(schema, bool):     # JSON Schema's true (anything) and false (nothing)
            schema = {} if schema else {"not": {}}
        if not isinstance(schema, dict):
            raise BadFormat("a json_schema format needs its schema as a JSON object")
        return _json(schema)
    if kind == "lark":
        lark = fmt.get("grammar")
        if not isinstance(lark, str) or not lark.strip():
            raise BadFormat("a lark format needs its grammar as text")
        return LLMatcher.grammar_from_lark(lark)
    raise BadFormat(f"format type {kind!r} is not supported; expected one of {', '.join(FORMATS)}")


def _json(schema: dict) -> str:
    try:
        return LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
    except (ValueError, TypeError) as e:
        raise BadFormat(f"the JSON schema is not valid: {e}") from None

