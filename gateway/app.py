"""The aiohttp application: every protocol's routes, each wrapped with the API key check and
error rendering in that protocol's shape. Adding a protocol is adding it to PROTOCOLS."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

from . import auth, openapi
from .backend import Backend
from .config import GatewayConfig
from .errors import GatewayError, MethodNotAllowed, NotFound, UpstreamFailed
from .protocols.anthropic import Anthropic
from .protocols.base import Handler, Protocol
from .protocols.native import Native
from .protocols.ollama import Ollama
from .protocols.openai import OpenAI
from .protocols.responses import Responses
from .protocols.web import Web

log = logging.getLogger("llmbus.gateway")

PROTOCOLS: tuple[type[Protocol], ...] = (OpenAI, Responses, Anthropic, Ollama, Native, Web)


def build_app(backend: Backend, config: GatewayConfig) -> web.Application:
    protocols = [cls(backend, config) for cls in PROTOCOLS]
    native = next(p for p in protocols if isinstance(p, Native))
    app = web.Application(middlewares=[_unrouted(native)],
                          client_max_size=config.max_body_bytes)
    for proto in protocols:
        for method, path, handler in proto.routes():
            app.router.add_route(method, path,
                                 _wrap(proto, handler, config.api_key, backend.metrics))
    app[openapi.KEY] = protocols
    return app


def _wrap(proto: Protocol, handler: Handler, api_key: str | None, metrics) -> Handler:
    async def serve(request: web.Request) -> web.StreamResponse:
        resp = await answer(request)
        # A route's pattern, not its path: one series per endpoint, whatever the model id.
        metrics.requests.labels(proto.name, request.match_info.route.resource.canonical,
                                str(resp.status)).inc()
        return resp

    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            if not auth.is_open(request.path):
                auth.check(api_key, request.headers)   # headers only: the body is not read yet
            return await handler(request)
        except GatewayError as e:
            return await _answer(proto, request, e)
        except (asyncio.CancelledError, ConnectionError):
            raise                                       # the client left: nothing to answer
        except Exception as e:  # a bug answers in the protocol's shape and is logged
            log.exception("%s %s failed", request.method, request.path)
            return await _answer(proto, request, UpstreamFailed(
                f"internal error in the gateway: {type(e).__name__}: {e}"))

    return serve


async def _answer(proto: Protocol, request: web.Request, err: GatewayError) -> web.StreamResponse:
    stream = request.get("stream")
    if stream is None:
        return proto.error(err)
    # The 200 went out already: the error becomes the stream's last event.
    with contextlib.suppress(ConnectionError):
        await stream.write(proto.stream_error(err))
        await stream.write_eof()
    return stream


def _unrouted(native: Protocol):
    @web.middleware
    async def unrouted(request: web.Request, handler):
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return native.error(NotFound(f"no endpoint {request.method} {request.path}"))
        except web.HTTPMethodNotAllowed as e:
            return native.error(MethodNotAllowed(
                f"{request.method} is not allowed on {request.path} (allowed: "
                f"{', '.join(sorted(e.allowed_methods))})"))

    return unrouted
