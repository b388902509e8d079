"""`GET /openapi.json`: every route of every protocol, with the request bodies each protocol
declares (`Protocol.requests`) and its error shape (`Protocol.error_schema`)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .protocols.base import Protocol

KEY = web.AppKey("protocols", list)   # the app's protocols, which the document describes

_STREAM_TYPES = {"openai": "text/event-stream", "anthropic": "text/event-stream",
                 "ollama": "application/x-ndjson"}
_ERRORS = {"400": "malformed JSON or a bad field", "401": "missing or wrong API key",
           "404": "unknown model or path", "408": "the body came too slowly",
           "413": "the body is over the limit", "429": "the queue is full (see Retry-After)",
           "503": "no pipeline can serve now (see Retry-After)"}


def document(protocols: list[Protocol], version: str, models: list[str]) -> dict[str, Any]:
    """The OpenAPI 3.1 document; `models` (the ids served now) become the `model` field's
    enum, so that generic tools reach past the 404 of an unknown model."""
    paths: dict[str, dict] = {}
    for proto in protocols:
        for method, path, _ in proto.routes():
            if method == "HEAD":
                continue
            op: dict[str, Any] = {
                "operationId": f"{proto.name}_{method.lower()}_{_slug(path)}",
                "tags": [proto.name],
                "responses": {"200": _ok(proto, path), **{
                    code: {"description": text, "content": {"application/json": {
                        "schema": proto.error_schema}}} for code, text in _ERRORS.items()}},
            }
            body = proto.requests.get(path)
            if body is not None and models and "model" in body.get("properties", {}):
                body = {**body, "properties": {**body["properties"],
                                               "model": {"type": "string", "enum": models}}}
            if body is not None:
                op["requestBody"] = {"required": True,
                                     "content": {"application/json": {"schema": body}}}
            params = [{"name": p, "in": "path", "required": True, "schema": {
                "type": "string", **({"enum": models} if p == "id" and models else {})}}
                for p in _params(path)]
            if params:
                op["parameters"] = params
            paths.setdefault(path, {})[method.lower()] = op
    return {"openapi": "3.1.0",
            "info": {"title": "llmbus gateway", "version": version,
                     "description": "OpenAI, Anthropic and Ollama APIs over an llmbus cluster."},
            "components": {"securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"}}},
            "security": [{}, {"bearer": []}, {"apiKey": []}],
            "paths": paths}


# One server-sent event as generic tools read it (OpenAI sends data only; Anthropic names events).
_SSE_EVENT = {"type": "object", "required": ["data"], "properties": {
    "event": {"type": "string"}, "data": {"type": "string"}}}
# Answered in plain text: Prometheus' exposition format.
_TEXT_PATHS = {"/metrics"}


def _ok(proto: Protocol, path: str) -> dict:
    content = {"application/json": {"schema": {"type": "object"}}}
    if path in proto.requests and "stream" in proto.requests[path].get("properties", {}):
        kind = _STREAM_TYPES[proto.name]
        content[kind] = {"schema": _SSE_EVENT if kind == "text/event-stream" else {"type": "object"}}
    if path in _TEXT_PATHS:
        content = {"text/plain": {"schema": {"type": "string"}}}
    content = proto.answers.get(path, content)
    return {"description": "the answer", "content": content}


def _params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _slug(path: str) -> str:
    return "_".join(p.strip("{}") for p in path.split("/") if p) or "root"
