"""Reading a JSON request body field by field: each getter checks type and range and raises
BadRequest naming the field, so that every protocol reports bad input the same way."""

from __future__ import annotations

import math
from typing import Any

from .errors import BadRequest

_MISSING = object()
_INT_LO, _INT_HI = -(2 ** 63), 2 ** 63 - 1


class Fields:
    """A JSON object's fields; `prefix` names nested objects in errors (`options.seed`)."""

    def __init__(self, body: Any, prefix: str = ""):
        if not isinstance(body, dict):
            raise BadRequest(f"{prefix.rstrip('.') or 'the body'} must be a JSON object",
                             param=prefix.rstrip(".") or None)
        self.body = body
        self.prefix = prefix

    def _name(self, key: str) -> str:
        return self.prefix + key

    def _get(self, key: str, required: bool):
        value = self.body.get(key, _MISSING)
        if value is None:
            value = _MISSING       # JSON null means "not given" in every API we speak
        if value is _MISSING and required:
            raise BadRequest(f"{self._name(key)} is required", param=self._name(key))
        return value

    def has(self, key: str) -> bool:
        return self.body.get(key) is not None

    def str(self, key: str, default: str | None = None, required: bool = False) -> str | None:
        v = self._get(key, required)
        if v is _MISSING:
            return default
        if not isinstance(v, str):
            raise BadRequest(f"{self._name(key)} must be a string", param=self._name(key))
        return v

    def bool(self, key: str, default: bool = False) -> bool:
        v = self._get(key, False)
        if v is _MISSING:
            return default
        if not isinstance(v, bool):
            raise BadRequest(f"{self._name(key)} must be true or false", param=self._name(key))
        return v

    def int(self, key: str, default: int | None = None, lo: int | None = None,
            hi: int | None = None, required: bool = False) -> int | None:
        v = self._get(key, required)
        if v is _MISSING:
            return default
        # JSON has one number type: 3.0 is an integer, 3.5 and true are not.
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (
                isinstance(v, float) and not v.is_integer()):
            raise BadRequest(f"{self._name(key)} must be an integer", param=self._name(key))
        # Unbounded fields still end on the bus as msgpack integers: 64 bits at most.
        return self._range(key, int(v), _INT_LO if lo is None else lo, _INT_HI if hi is None else hi)

    def num(self, key: str, default: float | None = None, lo: float | None = None,
            hi: float | None = None) -> float | None:
        v = self._get(key, False)
        if v is _MISSING:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise BadRequest(f"{self._name(key)} must be a number", param=self._name(key))
        return self._range(key, float(v), lo, hi)

    def _range(self, key, v, lo, hi):
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            bounds = f"{'' if lo is None else lo}..{'' if hi is None else hi}"
            raise BadRequest(f"{self._name(key)} is {v}, outside {bounds}", param=self._name(key))
        return v

    def list(self, key: str, required: bool = False, min_len: int = 0) -> list | None:
        v = self._get(key, required)
        if v is _MISSING:
            return None
        if not isinstance(v, list) or len(v) < min_len:
            raise BadRequest(f"{self._name(key)} must be a list"
                             + (f" of at least {min_len} item(s)" if min_len else ""),
                             param=self._name(key))
        return v

    def obj(self, key: str) -> "Fields":
        v = self._get(key, False)
        return Fields({} if v is _MISSING else v, prefix=self._name(key) + ".")

    def stops(self, key: str, limit: int = 16) -> list[str]:
        """A stop string or a list of them (OpenAI accepts both)."""
        v = self._get(key, False)
        if v is _MISSING:
            return []
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
            raise BadRequest(f"{self._name(key)} must be a non-empty string or a list of them",
                             param=self._name(key))
        if len(items) > limit:
            raise BadRequest(f"{self._name(key)} has {len(items)} entries; at most {limit}",
                             param=self._name(key))
        return list(items)


def text_of(content: Any, param: str) -> str:
    """A message's content: a string, or a list of text parts ({type: text, text})."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(
                    part.get("text"), str):
                parts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise BadRequest(f"{param}[{i}] is a {kind!r} part; only text is supported",
                                 param=f"{param}[{i}]")
        return "".join(parts)
    raise BadRequest(f"{param} must be a string or a list of text parts", param=param)
