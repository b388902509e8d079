"""Reading a request's JSON body under a size limit and a deadline (a slow client cannot hold
a connection, a huge one cannot fill memory)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from .errors import BadRequest, BodyTooLarge, RequestTimeout


async def read_json(request: web.Request, limit: int, timeout: float) -> Any:
    """The parsed body; 413 past `limit` bytes (refused from Content-Length before reading),
    408 if it does not arrive within `timeout` seconds, 400 if it is not JSON."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise BodyTooLarge(f"the body is {declared} bytes; the limit is {limit}")
    try:
        raw = await asyncio.wait_for(_read_at_most(request, limit), timeout)
    except asyncio.TimeoutError:
        raise RequestTimeout(f"the body did not arrive within {timeout:g} s") from None
    if not raw.strip():
        raise BadRequest("the body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise BadRequest(f"the body is not valid JSON: {e}") from None


async def _read_at_most(request: web.Request, limit: int) -> bytes:
    chunks, size = [], 0
    while chunk := await request.content.read(65536):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
