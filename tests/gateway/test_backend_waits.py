"""The gateway's calls that nothing streams (a tokenizer's, an embedding's) wait up to carry_s
for a service of the served model, then say which is missing; a stopping gateway waits for
none. One loop (gateway/backend.py `_ask`), over a real directory that has found nobody."""

from __future__ import annotations

import time

import pytest

from gateway.errors import Unavailable
from gateway.model import ModelCard
from wire.messages.scheduler import Embed

from ..security.gateway_app import backend_of_nobody

CARRY_S = 0.2


def calls(backend):
    return {"tokenizer": lambda: backend.tokenize("hi", add_special=True, parse_special=False),
            "scheduler": lambda: backend.embed(Embed(inputs=["hi"]))}


async def test_a_call_waits_carry_s_for_its_service_then_names_it():
    async with backend_of_nobody() as backend:
        backend.card = ModelCard(id="m", identity="m-1", created=0, context_length=64)
        backend.carry_s = CARRY_S
        for kind, call in calls(backend).items():
            started = time.monotonic()
            with pytest.raises(Unavailable, match=rf"no {kind} of the served model is ready "
                                                  rf"\(waited {CARRY_S:g} s\)"):
                await call()
            assert CARRY_S <= time.monotonic() - started < 5, kind


async def test_a_stopping_gateway_waits_for_no_service():
    async with backend_of_nobody() as backend:
        backend.card = ModelCard(id="m", identity="m-1", created=0, context_length=64)
        backend.carry_s = 60.0
        backend.stopping = True
        for kind, call in calls(backend).items():
            started = time.monotonic()
            with pytest.raises(Unavailable, match="the gateway is stopping"):
                await call()
            assert time.monotonic() - started < 5, kind
