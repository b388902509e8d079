"""llmbus's own endpoints: /health, /v1/cluster (JSON, or live as server-sent events for a client
that accepts `text/event-stream`), and /tokenize, /detokenize as llama.cpp's server has them. Errors: {"error": {"code", "message", "type", "param"}} (llama.cpp's shape)."""

from __future__ import annotations

from aiohttp import web

from ..errors import BadRequest, GatewayError
from ..metrics import CONTENT_TYPE
from ..params import Body, Param
from .. import openapi
from ..stream import json_response, open_stream, sse
from .base import Protocol, error_headers


# The fields of each request body, declared once: read with their checks, and described in
# /openapi.json.
TOKENIZE = Body(content=Param.str(required=True), add_special=Param.bool(),
                parse_special=Param.bool(True), with_pieces=Param.bool(), model=Param.str())
DETOKENIZE = Body(tokens=Param.list({"items": {"type": "integer", "minimum": 0}}, required=True),
                  model=Param.str())


ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message", "type"]}}}


class Native(Protocol):
    name = "native"
    requests = {"/tokenize": TOKENIZE.schema(), "/detokenize": DETOKENIZE.schema()}
    answers = {"/v1/cluster": {"application/json": {"schema": {"type": "object"}},
                               "text/event-stream": {"schema": {"type": "string"}}}}
    error_schema = ERROR_SCHEMA

    def routes(self):
        return [("GET", "/health", self.health),
                ("GET", "/v1/cluster", self.cluster),
                ("GET", "/metrics", self.metrics),
                ("GET", "/openapi.json", self.openapi),
                ("POST", "/tokenize", self.tokenize),
                ("POST", "/detokenize", self.detokenize)]

    def error(self, err: GatewayError) -> web.Response:
        return json_response(error_body(err), err.status, error_headers(err))

    def stream_error(self, err: GatewayError) -> bytes:
        return sse(error_body(err))

    async def health(self, request: web.Request) -> web.Response:
        missing = self.backend.missing()
        if missing:
            return json_response({"status": "unavailable", "missing": missing}, 503,
                                 {"Retry-After": "1"})
        return json_response({"status": "ok", "model": self.backend.model().id})

    async def openapi(self, request: web.Request) -> web.Response:
        card = self.backend.card
        return json_response(openapi.document(request.app[openapi.KEY], _version(),
                                              [card.id] if card else []))

    async def metrics(self, request: web.Request) -> web.Response:
        metrics = self.backend.metrics
        metrics.scheduler_stats(await self.backend.scheduler_stats())
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def cluster(self, request: web.Request) -> web.StreamResponse:
        if "text/event-stream" not in request.headers.get("Accept", ""):
            return json_response(await self.backend.cluster())
        # Live: an event at once, then on each change (a client that leaves cancels this).
        resp = await open_stream(request, "text/event-stream")
        async for snap in self.backend.feed.changes():
            await resp.write(sse(snap, event="cluster"))
        await resp.write_eof()
        return resp

    async def tokenize(self, request: web.Request) -> web.Response:
        v = TOKENIZE.read(await self.body(request))
        self.backend.model(v["model"])
        ids = await self.backend.tokenize(v["content"], add_special=v["add_special"],
                                          parse_special=v["parse_special"])
        if not v["with_pieces"]:
            return json_response({"tokens": ids})
        card = self.backend.model()
        pieces = [{"id": t, "piece": card.token(t).decode("utf-8", errors="replace")} for t in ids]
        return json_response({"tokens": pieces})

    async def detokenize(self, request: web.Request) -> web.Response:
        v = DETOKENIZE.read(await self.body(request))
        self.backend.model(v["model"])
        ids = v["tokens"]
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise BadRequest("tokens must be a list of token ids (integers >= 0)", param="tokens")
        return json_response({"content": await self.backend.detokenize(ids)})


def error_body(err: GatewayError) -> dict:
    return {"error": {"code": err.status, "message": err.message, "type": err.kind,
                      "param": err.param}}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("llmbus")
    except PackageNotFoundError:
        return "0+unknown"
