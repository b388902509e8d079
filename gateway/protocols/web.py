"""The web page: `GET /` for a browser (it asks for `text/html`), its files under `/ui/`.
Any other client asking for `/` gets Ollama's "Ollama is running" (Open WebUI and Ollama
clients check it). The page's data comes from the public APIs: /v1/models, /v1/chat/completions,
and /v1/cluster as server-sent events.

The files are package data (gateway/web/), read once at start: plain HTML, CSS and JavaScript
modules, no build step and nothing fetched from elsewhere. The page names its files under a
version, a hash of them all (`/ui/VERSION/main.js`; the modules' relative imports inherit it),
so a browser keeps them for good and a second visit asks for the page alone (revalidated by its
ETag); a new version of any file is a new version of every path."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.resources import files

from aiohttp import web

from ..errors import GatewayError, NotFound
from ..stream import json_response, sse
from .base import Protocol, error_headers
from .native import ERROR_SCHEMA, error_body

TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
INDEX = "index.html"
# The page runs only its own files and talks only to its own server; model text is never markup.
CSP = ("default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
       "form-action 'none'; frame-ancestors 'none'")


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets() -> tuple[str, dict[str, Asset]]:
    """The version, and every file of the page by name (the only names `/ui/` answers: no path
    reaches further), the page's own links made to name the version."""
    raw = {}
    for f in sorted(files("gateway").joinpath("web").iterdir(), key=lambda f: f.name):
        suffix = f.name[f.name.rfind("."):]
        if f.is_file() and suffix in TYPES:
            raw[f.name] = (f.read_bytes(), TYPES[suffix])
    digest = hashlib.sha256()
    for name, (body, _) in raw.items():
        digest.update(name.encode() + b"\0" + body + b"\0")
    version = digest.hexdigest()[:12]
    index, kind = raw[INDEX]
    raw[INDEX] = (index.replace(b'"/ui/', f'"/ui/{version}/'.encode()), kind)
    return version, {name: Asset(body, kind, '"' + hashlib.sha256(body).hexdigest()[:20] + '"')
                     for name, (body, kind) in raw.items()}


def wants_html(request: web.Request) -> bool:
    return "text/html" in request.headers.get("Accept", "")


class Web(Protocol):
    name = "web"
    answers = {"/": {"text/plain": {"schema": {"type": "string"}},
                     "text/html": {"schema": {"type": "string"}}},
               "/ui/{version}/{asset}": {t.split(";")[0]: {"schema": {"type": "string"}}
                                         for t in TYPES.values()}}
    error_schema = ERROR_SCHEMA     # llama.cpp's shape, as the native endpoints

    def __init__(self, backend, config):
        super().__init__(backend, config)
        self.version, self.assets = load_assets()

    def routes(self):
        return [("GET", "/", self.root), ("HEAD", "/", self.root),
                ("GET", "/ui/{version}/{asset}", self.asset)]

    def error(self, err: GatewayError) -> web.Response:
        return json_response(error_body(err), err.status, error_headers(err))

    def stream_error(self, err: GatewayError) -> bytes:
        return sse(error_body(err))

    async def root(self, request: web.Request) -> web.Response:
        if wants_html(request):
            resp = self._send(request, self.assets[INDEX], "no-cache")
            resp.headers["Content-Security-Policy"] = CSP
            return resp
        return web.Response(text="Ollama is running")

    async def asset(self, request: web.Request) -> web.Response:
        a = self.assets.get(request.match_info["asset"])
        if a is None:
            raise NotFound(f"the page has no file {request.match_info['asset']!r}")
        # Another version (a page loaded before an upgrade) gets today's file, kept by no one.
        current = request.match_info["version"] == self.version
        return self._send(request, a, "public, max-age=31536000, immutable" if current else "no-cache")

    @staticmethod
    def _send(request: web.Request, a: Asset, cache: str) -> web.Response:
        headers = {"ETag": a.etag, "Cache-Control": cache, "X-Content-Type-Options": "nosniff"}
        if request.headers.get("If-None-Match") == a.etag:
            return web.Response(status=304, headers=headers)
        return web.Response(body=a.body, headers={**headers, "Content-Type": a.content_type})
