"""What a protocol is: routes over the Backend, and how it writes errors (before and after a
stream began). app.py wraps every route with auth and error rendering in its protocol's shape."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from aiohttp import web

from ..backend import Backend
from ..body import read_json
from ..config import GatewayConfig
from ..errors import GatewayError
from ..fields import Fields

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Protocol:
    name = "base"
    # JSON schemas for /openapi.json: request bodies by path, and this protocol's error body.
    requests: dict[str, dict] = {}
    error_schema: dict = {"type": "object"}
    # A 200's content by path where it is not JSON (or not only): {media type: {"schema": ...}}.
    answers: dict[str, dict] = {}

    def __init__(self, backend: Backend, config: GatewayConfig):
        self.backend = backend
        self.config = config

    def routes(self) -> list[tuple[str, str, Handler]]:
        """(method, path, handler) of every endpoint this protocol serves."""
        raise NotImplementedError

    def error(self, err: GatewayError) -> web.Response:
        """The error as this protocol's clients expect it before a stream began."""
        raise NotImplementedError

    def stream_error(self, err: GatewayError) -> bytes:
        """The error as one event of this protocol's stream (the stream ends after it)."""
        raise NotImplementedError

    async def body(self, request: web.Request) -> Fields:
        """The request's JSON object, read under the body limit and deadline."""
        return Fields(await read_json(request, self.config.max_body_bytes,
                                      self.config.read_timeout))


def error_headers(err: GatewayError) -> dict[str, str]:
    if err.retry_after is None:
        return {}
    return {"Retry-After": str(max(1, math.ceil(err.retry_after)))}

