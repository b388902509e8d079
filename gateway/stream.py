"""Writing a streamed HTTP answer: SSE events (OpenAI, Anthropic) or NDJSON lines (Ollama)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; `data` is JSON-encoded unless it is already a string."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False,
                                                             separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


class SseTemplate:
    """SSE events that differ from one template only by one string (a stream's text chunks):
    the template is encoded once, and each event is its two halves around the new string's
    JSON, the very bytes `sse` would write for the whole object."""

    _HOLE = "\x00llmbus-hole\x00"

    def __init__(self, template: Any, put: Callable[[Any, str], None]):
        put(template, self._HOLE)
        self._pre, self._post = sse(template).split(json.dumps(self._HOLE).encode())

    def __call__(self, text: str) -> bytes:
        return self._pre + json.dumps(text, ensure_ascii=False).encode() + self._post


def ndjson(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


async def open_stream(request: web.Request, content_type: str) -> web.StreamResponse:
    """Start a streamed 200 answer; kept on the request so that an error raised after this
    point is written in the protocol's in-stream form (see app.py)."""
    resp = web.StreamResponse(status=200, headers={
        "Content-Type": content_type, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    request["stream"] = resp
    return resp


def json_response(obj: Any, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(status=status, headers=headers,
                        body=json.dumps(obj, ensure_ascii=False).encode(),
                        content_type="application/json")
