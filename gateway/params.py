"""A request body declared once: each protocol's endpoints list their fields in one table, which
both reads a body (type and range checked by `Fields`, a bad field named) and describes it in
`/openapi.json`.

    CHAT = Body(model=Param.str(required=True), temperature=Param.num(1.0, lo=0, hi=2))
    got = CHAT.read(fields)          # {"model": ..., "temperature": 1.0}
    CHAT.schema()                    # {"type": "object", "required": ["model"], ...}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .fields import Fields

_JSON_TYPES = {"str": "string", "int": "integer", "num": "number", "bool": "boolean",
               "list": "array", "obj": "object"}


@dataclass(frozen=True)
class Param:
    """One field: its kind (how `Fields` reads it), default, range and what the document says.
    `schema` gives the JSON schema where the kind says too little (a list's items, a union)."""
    kind: str
    default: Any = None
    lo: float | None = None
    hi: float | None = None
    required: bool = False
    min_len: int = 0                   # list: fewest items
    limit: int = 16                    # stops: most entries
    schema: dict = field(default_factory=dict)

    @classmethod
    def str(cls, default=None, **kw) -> "Param":
        return cls("str", default, **kw)

    @classmethod
    def int(cls, default=None, **kw) -> "Param":
        return cls("int", default, **kw)

    @classmethod
    def num(cls, default=None, **kw) -> "Param":
        return cls("num", default, **kw)

    @classmethod
    def bool(cls, default=False, **kw) -> "Param":
        return cls("bool", default, **kw)

    @classmethod
    def list(cls, schema: dict | None = None, **kw) -> "Param":
        return cls("list", schema=schema or {}, **kw)

    @classmethod
    def obj(cls, schema: dict | None = None, **kw) -> "Param":
        return cls("obj", schema=schema or {}, **kw)

    @classmethod
    def stops(cls, limit: int = 16) -> "Param":
        """A stop string or a list of them (OpenAI accepts both)."""
        return cls("stops", limit=limit)

    @classmethod
    def raw(cls, schema: dict, required: bool = False) -> "Param":
        """A field the endpoint reads itself (messages, tools): the table only describes it."""
        return cls("raw", required=required, schema=schema)

    def read(self, f: Fields, name: str) -> Any:
        if self.kind == "str":
            return f.str(name, self.default, required=self.required)
        if self.kind == "int":
            return f.int(name, self.default, lo=self.lo, hi=self.hi, required=self.required)
        if self.kind == "num":
            return f.num(name, self.default, lo=self.lo, hi=self.hi)
        if self.kind == "bool":
            return f.bool(name, self.default)
        if self.kind == "list":
            return f.list(name, required=self.required, min_len=self.min_len)
        if self.kind == "obj":
            return f.obj(name)
        if self.kind == "stops":
            return f.stops(name, limit=self.limit)
        if self.required and not f.has(name):
            f.str(name, required=True)          # the same "is required" for every kind
        return f.body.get(name)

    def json_schema(self) -> dict:
        if self.kind == "stops":
            return {"anyOf": [{"type": "string", "minLength": 1},
                              {"type": "array", "maxItems": self.limit,
                               "items": {"type": "string", "minLength": 1}}]}
        out = {"type": _JSON_TYPES[self.kind]} if self.kind in _JSON_TYPES else {}
        if self.lo is not None:
            out["minimum"] = self.lo
        if self.hi is not None:
            out["maximum"] = self.hi
        if self.min_len:
            out["minItems"] = self.min_len
        return {**out, **self.schema}


class Body:
    """A request body's fields, in the order the document lists them."""

    def __init__(self, **params: Param):
        self.params = params

    def read(self, f: Fields) -> dict[str, Any]:
        """Every field of the table, read and checked (BadRequest names the first bad one)."""
        return {name: p.read(f, name) for name, p in self.params.items()}

    def schema(self) -> dict:
        return {"type": "object",
                "required": [n for n, p in self.params.items() if p.required],
                "properties": {n: p.json_schema() for n, p in self.params.items()}}

    def extend(self, **params: Param) -> "Body":
        return Body(**self.params, **params)
