"""Each protocol's request fields are one table: the same entry reads a body (its check names the
field) and describes the field in /openapi.json, so the two cannot disagree."""

from __future__ import annotations

import pytest

from gateway.errors import BadRequest
from gateway.fields import Fields
from gateway.protocols import anthropic, native, ollama, openai

TABLES = {"openai chat": openai.CHAT, "openai completions": openai.COMPLETIONS,
          "anthropic messages": anthropic.MESSAGES, "anthropic count": anthropic.COUNT_TOKENS,
          "ollama chat": ollama.CHAT, "ollama generate": ollama.GENERATE,
          "ollama options": ollama.OPTIONS, "tokenize": native.TOKENIZE,
          "detokenize": native.DETOKENIZE}
RANGED = [(t, name, p) for t, body in TABLES.items() for name, p in body.params.items()
          if p.kind in ("int", "num") and (p.lo is not None or p.hi is not None)]


def minimal(body) -> dict:
    """A body with every required field, of its kind."""
    sample = {"str": "x", "int": 1, "num": 1.0, "bool": True, "list": [1], "obj": {}}
    out = {}
    for name, p in body.params.items():
        if p.required:
            out[name] = sample.get(p.kind, [{"role": "user", "content": "hi"}])
    return out


@pytest.mark.parametrize("table", sorted(TABLES))
def test_the_schema_lists_every_field_and_its_required_ones(table):
    body = TABLES[table]
    schema = body.schema()
    assert list(schema["properties"]) == list(body.params)
    assert schema["required"] == [n for n, p in body.params.items() if p.required]
    got = body.read(Fields(minimal(body)))
    assert set(got) == set(body.params)
    for name in schema["required"]:
        with pytest.raises(BadRequest) as e:
            body.read(Fields({k: v for k, v in minimal(body).items() if k != name}))
        assert e.value.param == name


@pytest.mark.parametrize("table, name, p", RANGED, ids=[f"{t}.{n}" for t, n, _ in RANGED])
def test_a_field_is_refused_exactly_past_the_range_the_document_gives(table, name, p):
    body = TABLES[table]
    prop = body.schema()["properties"][name]
    assert (prop.get("minimum"), prop.get("maximum")) == (p.lo, p.hi)
    step = 1 if p.kind == "int" else 0.5
    for edge, past in ((p.lo, -step), (p.hi, step)):
        if edge is None:
            continue
        body.read(Fields({**minimal(body), name: edge}))                 # the edge is in
        with pytest.raises(BadRequest) as e:
            body.read(Fields({**minimal(body), name: edge + past}))
        assert e.value.param == name
