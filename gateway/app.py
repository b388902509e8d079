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
from .crosssite import EXPOSED_HEADERS, Sites, preflight_headers
from .errors import Forbidden, GatewayError, MethodNotAllowed, NotFound, UpstreamFailed
from .lograte import RateLimitedLog
from .protocols.anthropic import Anthropic
from .protocols.base import Handler, Protocol
from .protocols.native import Native
from .protocols.ollama import Ollama
from .protocols.openai import OpenAI
from .protocols.responses import Responses
from .protocols.web import Web

log = logging.getLogger("llmbus.gateway")
# A failure that repeats (a gateway out of file descriptors, a bug every request meets) is
# logged once a minute with its count, not once per request.
_failures = RateLimitedLog(log, interval_s=60.0)
# The request's allowed origin of another site (aiohttp before 3.12 has no RequestKey).
_CORS = web.RequestKey("cors_origin", str) if hasattr(web, "RequestKey") else "cors_origin"

PROTOCOLS: tuple[type[Protocol], ...] = (OpenAI, Responses, Anthropic, Ollama, Native, Web)


def build_app(backend: Backend, config: GatewayConfig) -> web.Application:
    protocols = [cls(backend, config) for cls in PROTOCOLS]
    native = next(p for p in protocols if isinstance(p, Native))
    sites = Sites.of(config.host, config.allowed_hosts, config.cors_origins)
    app = web.Application(middlewares=[_cross_site(sites, native), _unrouted(native)],
                          client_max_size=config.max_body_bytes)
    app.on_response_prepare.append(_cors_headers)
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
            _failures.exception((type(e).__name__, request.path), "%s %s failed: %s: %.200s",
                                request.method, request.path, type(e).__name__, e)
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


def _cross_site(sites: Sites, native: Protocol):
    """Refuse what a web page of another site (or a rebound DNS name) makes a browser send,
    answer CORS preflights of the origins let in (see crosssite.py)."""
    @web.middleware
    async def cross_site(request: web.Request, handler):
        host = request.headers.get("Host")
        if (why := sites.host_refusal(host)) is not None:
            return native.error(Forbidden(why))
        origin = request.headers.get("Origin")
        if origin is not None:
            if not sites.origin_allowed(origin, host):
                return native.error(Forbidden(
                    f"requests from pages of {origin} are not allowed; run the gateway with "
                    f"--cors-origin {origin} to allow them"))
            if sites.cors(origin):
                request[_CORS] = origin
                if (request.method == "OPTIONS"
                        and "Access-Control-Request-Method" in request.headers):
                    return web.Response(status=204, headers=preflight_headers(
                        request.headers.get("Access-Control-Request-Headers")))
        return await handler(request)

    return cross_site


async def _cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    origin = request.get(_CORS)
    if origin is not None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        response.headers.add("Vary", "Origin")
