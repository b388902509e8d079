"""Finding: 4 MiB JSON bodies were parsed on the event loop (/health stalled to 893 ms). A body
over 64 KiB is parsed in a worker thread: the loop answers /health meanwhile."""

from __future__ import annotations

import asyncio
import json
import threading

from gateway import body

from .gateway_app import gateway_client


async def test_a_4_mib_body_is_parsed_off_the_event_loop(monkeypatch):
    loop_thread = threading.current_thread()
    parsed_on, parsing, release = [], threading.Event(), threading.Event()
    real = body.parse

    def parse(raw):
        parsed_on.append(threading.current_thread())
        if len(raw) > body.PARSE_IN_THREAD_BYTES:
            parsing.set()
            release.wait(30)       # held until /health has answered meanwhile
        return real(raw)
    monkeypatch.setattr(body, "parse", parse)

    big = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                      "stop": [str(i) for i in range(400_000)]}).encode()
    assert 3 << 20 < len(big) < 4 << 20
    async with gateway_client() as (client, _):
        post = asyncio.ensure_future(client.post("/v1/chat/completions", data=big,
                                                 headers={"Content-Type": "application/json"}))
        assert await asyncio.to_thread(parsing.wait, 30)
        async with client.get("/health") as resp:    # answered while the body is being parsed
            assert resp.status == 503
        release.set()
        resp = await post
        assert resp.status in (400, 503)     # (too many stop strings, or no cluster here)
        resp.release()
    assert parsed_on and all(t is not loop_thread for t in parsed_on)
