"""A request's `format` (wire.messages.scheduler.Generate) as an llguidance grammar, pure.

    grammar_of({"type": "json_schema", "schema": {"type": "object"}})   # llguidance's JSON text

JSON comes out compact, as json.dumps writes it (", " between items, ": " after keys, no other
whitespace): what small models were trained on, and no room to pad an answer with blank lines
until it runs out of tokens. A schema's own "x-guidance" options override that.

A lark format with a `trigger` holds only from where the trigger appears in the answer on (a tool
call the model opens when it decides to): its grammar says what follows the trigger, and
`grammar_of` gives the grammar a matcher started at the trigger's token follows (any text, up to
and with the trigger, then the format's grammar); `triggered.py` starts it there.
"""

from __future__ import annotations

import json
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
        if "trigger" not in fmt:
            return LLMatcher.grammar_from_lark(lark)
        # The text before the trigger is one lazy lexeme (it ends at the trigger's first
        # appearance); the format's grammar, a grammar of its own, follows.
        head = (f"start: opened @rest\nopened[lazy]: TEXT_AND_TRIGGER\n"
                f"TEXT_AND_TRIGGER: /(.|\\n)*/ {json.dumps(trigger_of(fmt))}\n")
        return json.dumps({"grammars": [{"lark_grammar": head},
                                        {"name": "rest", "lark_grammar": lark}]})
    raise BadFormat(f"format type {kind!r} is not supported; expected one of {', '.join(FORMATS)}")


def trigger_of(fmt: Any) -> str | None:
    """The text a format holds from (None: from the start of the answer)."""
    trigger = fmt.get("trigger") if isinstance(fmt, dict) else None
    if trigger is not None and (not isinstance(trigger, str) or not trigger):
        raise BadFormat("a format's trigger must be non-empty text")
    return trigger


def _json(schema: dict) -> str:
    try:
        return LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
    except (ValueError, TypeError) as e:
        raise BadFormat(f"the JSON schema is not valid: {e}") from None

