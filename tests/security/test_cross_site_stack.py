"""Finding (on a real stack): a `text/plain` POST with a foreign `Origin` got a 200 completion.
It gets 403 now, and what the official clients and the README's curl commands send still
works."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request

import anthropic
import ollama
import openai

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
