"""Structured output asked for in each protocol's words, read into the one form the scheduler
takes (wire.messages.scheduler.Generate.format), and the fields' schemas for /openapi.json.

    openai_format(f)      # response_format: text, json_object, json_schema {name, schema, strict}
    anthropic_format(f)   # output_config.format (or the older output_format): json_schema
    ollama_format(f)      # format: "json" or a JSON schema
    responses_format(f)   # text.format (Responses API): text, json_object, json_schema {name, schema}

A format we do not support is a 400 naming it, never ignored; whether a schema compiles is the
scheduler's to say (bad_format, also a 400).
"""

from __future__ import annotations

from typing import Any

from .errors import BadRequest
from .fields import Fields

JSON_OBJECT = {"type": "json_object"}

OPENAI_SCHEMA = {"type": "object", "required": ["type"], "properties": {
    "type": {"enum": ["text", "json_object", "json_schema"]},
    "json_schema": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "description": {"type": "string"},
        "schema": {"type": "object"}, "strict": {"type": ["boolean", "null"]}}}}}
ANTHROPIC_SCHEMA = {"type": "object", "required": ["type", "schema"], "properties": {
    "type": {"const": "json_schema"}, "schema": {"type": "object"}}}
OUTPUT_CONFIG_SCHEMA = {"type": "object", "properties": {"format": ANTHROPIC_SCHEMA}}
RESPONSES_TEXT_SCHEMA = {"type": "object", "properties": {"format": {
    "type": "object", "required": ["type"], "properties": {
        "type": {"enum": ["text", "json_object", "json_schema"]}, "name": {"type": "string"},
        "description": {"type": "string"}, "schema": {"type": "object"},
        "strict": {"type": ["boolean", "null"]}}}}}
OLLAMA_SCHEMA = {"anyOf": [{"enum": ["", "json"]}, {"type": "object"}]}


def _schema(schema: Any, param: str) -> dict:
    if isinstance(schema, bool):         # JSON Schema's true and false
        return {"type": "json_schema", "schema": schema}
    if not isinstance(schema, dict):
        raise BadRequest(f"{param} must be a JSON schema object", param=param)
    return {"type": "json_schema", "schema": schema}


def openai_format(f: Fields) -> dict | None:
    """`response_format`: {"type": "text"} (free), "json_object", or "json_schema" with
    `json_schema.schema` (strict or not, it is enforced: the answer always follows it)."""
    if not f.has("response_format"):
        return None
    rf = f.obj("response_format")
    kind = rf.str("type", required=True)
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    if kind == "json_schema":
        js = rf.obj("json_schema")
        if not js.has("schema"):
            return JSON_OBJECT
        return _schema(js.body["schema"], "response_format.json_schema.schema")
    raise BadRequest(f"response_format.type {kind!r} is not supported; expected text, "
                     f"json_object or json_schema", param="response_format.type")


def anthropic_format(f: Fields) -> dict | None:
    """`output_config.format` (or the older `output_format`): {"type": "json_schema",
    "schema": {...}}."""
    if f.has("output_config") and f.obj("output_config").has("format"):
        param, fmt = "output_config.format", f.obj("output_config").obj("format")
    elif f.has("output_format"):
        param, fmt = "output_format", f.obj("output_format")
    else:
        return None
    kind = fmt.str("type", required=True)
    if kind != "json_schema":
        raise BadRequest(f"{param}.type {kind!r} is not supported; expected json_schema",
                         param=f"{param}.type")
    if not fmt.has("schema"):
        raise BadRequest(f"{param}.schema is required", param=f"{param}.schema")
    return _schema(fmt.body["schema"], f"{param}.schema")


def ollama_format(f: Fields) -> dict | None:
    """`format`: "json" (any JSON object) or a JSON schema; "" is none."""
    fmt = f.body.get("format")
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return JSON_OBJECT
    if isinstance(fmt, str):
        raise BadRequest(f"format {fmt!r} is not supported; expected \"json\" or a JSON schema",
                         param="format")
    return _schema(fmt, "format")


def responses_format(f: Fields) -> dict | None:
    """`text.format` of the Responses API: {"type": "text"}, "json_object", or "json_schema"
    with `name` and `schema` beside the type (not nested as in `response_format`)."""
    if not f.has("text") or not f.obj("text").has("format"):
        return None
    fmt = f.obj("text").obj("format")
    kind = fmt.str("type", required=True)
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    if kind == "json_schema":
        if not fmt.has("schema"):
            raise BadRequest("text.format.schema is required", param="text.format.schema")
        return _schema(fmt.body["schema"], "text.format.schema")
    raise BadRequest(f"text.format.type {kind!r} is not supported; expected text, json_object "
                     f"or json_schema", param="text.format.type")
