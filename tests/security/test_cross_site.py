"""Finding: a `text/plain` POST with a foreign `Origin` got a 200 completion; nothing checked
Origin, Host or Content-Type, so a web page could use the API and DNS rebinding read answers
and /v1/cluster. Refused now: 403 for another site's Origin or a Host that is not ours, 415
for a body not declared JSON; `--cors-origin` lets a front end in, preflight included."""

from __future__ import annotations

import pytest

from gateway.config import GatewayConfig

from .gateway_app import gateway_client

CHAT = '{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
EVIL = "http://evil.example"


def status_of(resp) -> int:
    return resp.status


async def post(client, headers, path="/v1/chat/completions", body=CHAT):
    async with client.post(path, data=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None), resp.headers


async def test_a_cross_site_text_plain_post_is_403():
    async with gateway_client() as (client, _):
        port = client.server.port
        status, body, _ = await post(client, {"Content-Type": "text/plain", "Origin": EVIL,
                                              "Host": f"127.0.0.1:{port}"})
        assert status == 403 and "evil.example" in body["error"]["message"]
        # The same body as JSON, from no browser: through the checks (503: no cluster here).
        status, _, _ = await post(client, {"Content-Type": "application/json"})
        assert status == 503


@pytest.mark.parametrize("ctype,origin,expected", [
    ("text/plain", None, 415), ("multipart/form-data; boundary=x", None, 415),
    ("application/x-www-form-urlencoded", "same", 415),
    ("application/x-www-form-urlencoded", None, 503),     # curl -d, Ollama's examples
    (None, None, 503), ("application/json; charset=utf-8", "same", 503),
    ("application/vnd.api+json", None, 503)])
async def test_the_body_must_be_declared_json(ctype, origin, expected):
    async with gateway_client() as (client, _):
        headers = {"Content-Type": ctype or ""}
        if origin == "same":
            headers["Origin"] = f"http://127.0.0.1:{client.server.port}"
        async with client.post("/v1/chat/completions", data=CHAT.encode(),
                               headers=headers, skip_auto_headers=["Content-Type"]) as resp:
            assert resp.status == expected, await resp.text()


@pytest.mark.parametrize("host,expected", [
    ("evil.example:{port}", 403), ("evil.example", 403), ("127.0.0.1.nip.io:{port}", 403),
    ("127.0.0.1:{port}", 200), ("localhost:{port}", 200), ("LOCALHOST.:{port}", 200),
    ("[::1]:{port}", 200), ("127.0.0.2:{port}", 200), ("192.168.1.9:{port}", 403)])
async def test_dns_rebinding_gets_nothing(host, expected):
    async with gateway_client() as (client, _):
        headers = {"Host": host.format(port=client.server.port)}
        for path in ("/v1/cluster", "/v1/models", "/openapi.json"):
            async with client.get(path, headers=headers) as resp:
                assert resp.status in ((403,) if expected == 403 else (200, 503)), path
                if expected == 403:
                    assert "--allowed-host" in (await resp.json())["error"]["message"]


async def test_allowed_host_lets_a_name_in():
    async with gateway_client(allowed_hosts=("llm.lan",)) as (client, _):
        async with client.get("/v1/cluster", headers={"Host": "llm.lan:8080"}) as resp:
            assert resp.status == 200
        async with client.get("/v1/cluster", headers={"Host": "other.lan"}) as resp:
            assert resp.status == 403


def test_a_wildcard_bind_answers_on_this_machines_names_and_addresses():
    import socket
    from gateway.crosssite import Sites, host_name
    sites = Sites.of("0.0.0.0")
    assert sites.host_refusal(f"{socket.gethostname()}:8080") is None
    assert sites.host_refusal("10.1.2.3:8080") is None       # an address cannot be rebound
    assert sites.host_refusal("localhost") is None
    assert sites.host_refusal("evil.example:8080") is not None
    assert Sites.of("0.0.0.0", ("*",)).host_refusal("evil.example") is None
    assert host_name("[::1]:80") == "::1" and host_name("Example.COM.") == "example.com"


async def test_a_page_the_gateway_serves_may_call_it():
    async with gateway_client() as (client, _):
        own = f"http://127.0.0.1:{client.server.port}"
        status, _, headers = await post(client, {"Content-Type": "application/json",
                                                 "Origin": own})
        assert status == 503 and "Access-Control-Allow-Origin" not in headers


async def test_cors_origin_opens_cors_with_preflight():
    front = "https://chat.example.com"
    async with gateway_client(cors_origins=(front,)) as (client, _):
        async with client.options("/v1/chat/completions", headers={
                "Origin": front, "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type"}) as resp:
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == front
            assert "POST" in resp.headers["Access-Control-Allow-Methods"]
            assert resp.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
        status, _, headers = await post(client, {"Content-Type": "application/json",
                                                 "Origin": front})
        assert status == 503 and headers["Access-Control-Allow-Origin"] == front
        async with client.options("/v1/chat/completions", headers={
                "Origin": EVIL, "Access-Control-Request-Method": "POST"}) as resp:
            assert resp.status == 403 and "Access-Control-Allow-Origin" not in resp.headers


def test_settings_are_options_of_the_gateway():
    import argparse
    from gateway.cli import add_arguments
    from bus.options import options_of
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--cors-origin", "https://a.example", "--cors-origin", "null",
                         "--allowed-host", "llm.lan", "--max-connections", "8"])
    given = options_of(GatewayConfig, args)
    assert given == {"cors_origins": ("https://a.example", "null"),
                     "allowed_hosts": ("llm.lan",), "max_connections": 8}
    with pytest.raises(ValueError, match="cors-origin"):
        GatewayConfig(cors_origins=("chat.example.com",))


def test_body_refusal_names_the_fix():
    from gateway.crosssite import body_refusal
    assert "application/json" in body_refusal("text/plain", None)
