"""Writing a streamed HTTP answer: SSE events (OpenAI, Anthropic) or NDJSON lines (Ollama)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; `data` is JSON-encoded unless it is already a string."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False,
                                                             separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


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
