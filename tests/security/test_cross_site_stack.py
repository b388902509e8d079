"""Finding (on a real stack): a `text/plain` POST with a foreign `Origin` got a 200 completion.
It gets 403 now, and what the official clients and the README's curl commands send still
works. `llmbus up --allowed-host` and `--cors-origin` reach the gateway it starts."""

from __future__ import annotations

import http.client
import json
import subprocess
import urllib.error
import urllib.request

import anthropic
import ollama
import openai

from .conftest import ALLOWED_HOST, FRONT

CHAT = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2, "temperature": 0}


def post(url: str, body: bytes, headers: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def model_id(stack) -> str:
    with urllib.request.urlopen(stack.http + "/v1/models", timeout=30) as resp:
        return json.loads(resp.read())["data"][0]["id"]


def test_a_cross_site_text_plain_post_is_403(gw_stack):
    body = json.dumps({**CHAT, "model": model_id(gw_stack)}).encode()
    url = gw_stack.http + "/v1/chat/completions"
    status, answer = post(url, body, {"Content-Type": "text/plain",
                                      "Origin": "http://evil.example"})
    assert status == 403, answer
    status, answer = post(url, body, {"Content-Type": "text/plain"})
    assert status == 415, answer
    status, answer = post(url, body, {"Content-Type": "application/json"})
    assert status == 200 and answer["choices"][0]["message"]["content"]


def test_the_official_clients_and_curl_still_work(gw_stack):
    model = model_id(gw_stack)
    with openai.OpenAI(base_url=gw_stack.http + "/v1", api_key="x", max_retries=0) as c:
        assert c.chat.completions.create(model=model, **CHAT).choices[0].message.content
    with anthropic.Anthropic(base_url=gw_stack.http, api_key="x", max_retries=0) as c:
        assert c.messages.create(model=model, messages=CHAT["messages"],
                                 max_tokens=2).content[0].text
    reply = ollama.Client(host=gw_stack.http).chat(model=model, messages=CHAT["messages"],
                                                  options={"num_predict": 2}, stream=False)
    assert reply.message.content
    body = json.dumps({**CHAT, "model": model})
    # The README's command, and Ollama's documented one (curl -d, no Content-Type).
    for argv, path in ((["-H", "Content-Type: application/json"], "/v1/chat/completions"),
                       ([], "/api/chat")):
        out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", *argv, "-d", body,
                              gw_stack.http + path], capture_output=True, text=True, timeout=120)
        assert out.stdout.rsplit("\n", 1)[-1] == "200", out.stdout


def ask(stack, method: str, path: str, headers: dict) -> tuple[int, dict, bytes]:
    host, port = stack.http.removeprefix("http://").rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        c.request(method, path, headers=headers)    # its Host header, as given
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def test_up_hands_allowed_hosts_and_cors_origins_to_its_gateway(gw_stack):
    port = gw_stack.http.rsplit(":", 1)[1]
    for host in (ALLOWED_HOST, f"{ALLOWED_HOST}:{port}"):
        status, _, body = ask(gw_stack, "GET", "/v1/models", {"Host": host})
        assert status == 200, body
    status, _, body = ask(gw_stack, "GET", "/v1/models", {"Host": "other.example"})
    assert status == 403 and b"--allowed-host other.example" in body, body
    status, headers, body = ask(gw_stack, "OPTIONS", "/v1/chat/completions", {
        "Origin": FRONT, "Access-Control-Request-Method": "POST"})
    assert status == 204 and headers.get("Access-Control-Allow-Origin") == FRONT, (headers, body)
    status, _, body = ask(gw_stack, "OPTIONS", "/v1/chat/completions", {
        "Origin": "https://other.example", "Access-Control-Request-Method": "POST"})
    assert status == 403, body
