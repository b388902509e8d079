"""How the gateway serves the web page, over real HTTP on an empty bus: a browser gets the page,
any other client Ollama's text; the files are package data under a version, kept by browsers;
the page and its files need no key, the APIs it calls do; /v1/cluster is JSON, or live server-sent
events for a client that accepts them. And the page stays small and self-contained."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aiohttp

from ..gateway.test_edges import KEY, start

WEB = Path(__file__).resolve().parents[2] / "gateway" / "web"
HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def test_the_page_is_under_150_kb_and_loads_nothing_from_elsewhere():
    files = [f for f in WEB.iterdir() if f.is_file()]
    total = sum(f.stat().st_size for f in files)
    print(f"\nthe page: {len(files)} files, {total / 1024:.1f} KB")
    assert total < 150 * 1024
    index = (WEB / "index.html").read_text()
    assert not re.search(r'(src|href)="(https?:)?//', index)
    for js in WEB.glob("*.js"):
        text = js.read_text()
        # Model text and cluster data become DOM nodes with textContent, never parsed markup.
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", text), js
        for target in re.findall(r'from "([^"]+)"', text):
            assert target.startswith("./") and (WEB / target[2:]).is_file(), (js.name, target)


async def get(svc, path, headers=None):
    async with aiohttp.ClientSession() as s:
        async with s.get(svc.url + path, headers=headers or {}) as r:
            return r.status, r.headers, await r.read()


async def test_a_browser_gets_the_page_and_any_other_client_ollamas_text():
    svc = await start()
    try:
        status, headers, body = await get(svc, "/", HTML)
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        assert (await get(svc, "/"))[2] == b"Ollama is running"     # aiohttp, as Open WebUI
        links = re.findall(r'(?:src|href)="(/ui/[^"]+)"', body.decode())
        version = links[0].split("/")[2]
        assert len(links) == 9 and all(link.startswith(f"/ui/{version}/") for link in links)
        for link in links:
            status, headers, content = await get(svc, link)
            assert status == 200 and "immutable" in headers["Cache-Control"], link
            assert headers["Content-Type"].split(";")[0] == (
                "text/css" if link.endswith(".css") else "text/javascript")
            assert content == (WEB / link.rsplit("/", 1)[1]).read_bytes()
            assert (await get(svc, link, {"If-None-Match": headers["ETag"]}))[0] == 304
        # A page from before an upgrade asks for its old version: today's file, not kept.
        status, headers, _ = await get(svc, "/ui/0ld/main.js")
        assert status == 200 and headers["Cache-Control"] == "no-cache"
        status, _, body = await get(svc, f"/ui/{version}/..%2f..%2fpyproject.toml")
        assert status == 404 and "no file" in json.loads(body)["error"]["message"]
    finally:
        svc.stop()
        await svc.shutdown()


async def test_the_page_needs_no_key_and_the_apis_it_calls_do():
    svc = await start(api_key=KEY)
    try:
        status, _, body = await get(svc, "/", HTML)
        assert status == 200
        link = re.search(r'src="(/ui/[^"]+)"', body.decode()).group(1)
        assert (await get(svc, link))[0] == 200
        assert (await get(svc, "/v1/cluster"))[0] == 401
        assert (await get(svc, "/v1/cluster", {"Authorization": f"Bearer {KEY}"}))[0] == 200
    finally:
        svc.stop()
        await svc.shutdown()


async def test_the_cluster_is_json_or_live_events():
    svc = await start()
    try:
        status, headers, body = await get(svc, "/v1/cluster")
        view = json.loads(body)
        assert status == 200 and headers["Content-Type"].startswith("application/json")
        assert {"services", "layer_map", "hosts", "hops", "requests", "missing"} <= set(view)
        async with aiohttp.ClientSession() as s:
            async with s.get(svc.url + "/v1/cluster", headers={"Accept": "text/event-stream"}) as r:
                assert r.headers["Content-Type"] == "text/event-stream"
                event = (await r.content.readline()).decode()
                data = (await r.content.readline()).decode()
                assert event == "event: cluster\n" and data.startswith("data: ")
                assert json.loads(data[6:])["missing"] == view["missing"]
                # A second one follows within `every` (1 s) even when nothing changed.
                assert (await r.content.readline()) == b"\n"
                assert (await r.content.readline()) == b"event: cluster\n"
    finally:
        svc.stop()
        await svc.shutdown()
