"""Embeddings over HTTP, for the OpenAI and Ollama endpoints alike: the inputs a body may give,
checked and named when bad, and a vector as the client asked for it (floats, or base64 of
little-endian float32 as OpenAI's client asks by default)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from .errors import BadRequest

MAX_INPUTS = 2048            # OpenAI's limit on inputs per request
MAX_ID = 2 ** 31 - 1         # token ids travel as int32
# The inputs of one scheduler.embed: a request's inputs are sent in parts of about this much
# text (or ids at 5 bytes each), each well inside a message header (wire.limits, 1 MiB).
PART_BYTES = 256 << 10

_ID = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
# What `input` may be, for /openapi.json: OpenAI takes token ids too, Ollama text only.
TEXTS_SCHEMA = {"anyOf": [{"type": "string", "minLength": 1},
                          {"type": "array", "minItems": 1, "maxItems": MAX_INPUTS,
                           "items": {"type": "string", "minLength": 1}}]}
INPUT_SCHEMA = {"anyOf": [*TEXTS_SCHEMA["anyOf"],
                          {"type": "array", "minItems": 1, "items": _ID},
                          {"type": "array", "minItems": 1, "maxItems": MAX_INPUTS,
                           "items": {"type": "array", "minItems": 1,
                                     "items": _ID}}]}


def _ids(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ID


def read_input(value: Any, param: str = "input",
               token_ids: bool = True) -> tuple[list[str], list[list[int]]]:
    """(texts, token id lists), exactly one of them non-empty: a string, a list of strings, or
    (with `token_ids`) a list of ids or a list of such lists. BadRequest naming what is wrong."""
    if isinstance(value, str):
        value = [value]
    what = "a string or a list of strings" + (
        ", or token ids (a list of integers, or a list of such lists)" if token_ids else "")
    if not isinstance(value, list) or not value:
        raise BadRequest(f"{param} must be {what}, not empty", param=param)
    if len(value) > MAX_INPUTS:
        raise BadRequest(f"{param} has {len(value)} inputs; at most {MAX_INPUTS}", param=param)
    if all(isinstance(v, str) for v in value):
        for i, v in enumerate(value):
            if not v:
                raise BadRequest(f"{param}[{i}] is an empty string", param=f"{param}[{i}]")
        return list(value), []
    if token_ids and all(_ids(v) for v in value):
        return [], [list(value)]
    if token_ids and all(isinstance(v, list) for v in value):
        for i, ids in enumerate(value):
            if not ids or not all(_ids(t) for t in ids):
                raise BadRequest(f"{param}[{i}] must be a non-empty list of token ids (integers "
                                 f"in 0..{MAX_ID})", param=f"{param}[{i}]")
        return [], [list(v) for v in value]
    raise BadRequest(f"{param} must be {what}; its items are of mixed or other types", param=param)


def parts(texts: list[str], ids: list[list[int]],
          budget: int = PART_BYTES) -> list[dict[str, list]]:
    """The inputs cut into consecutive parts of at most `budget` bytes each (an input larger
    than that is a part of its own: the tokenizer's and the context's limits speak for it), as
    the `inputs` or `input_ids` of one scheduler.embed each, in order."""
    items = texts or ids
    key = "inputs" if texts else "input_ids"
    sizes = [len(t.encode("utf-8", "surrogatepass")) for t in texts] if texts else \
        [5 * len(i) for i in ids]
    out, part, used = [], [], 0
    for item, size in zip(items, sizes):
        if part and used + size > budget:
            out.append({key: part})
            part, used = [], 0
        part.append(item)
        used += size
    out.append({key: part})
    return out


def as_floats(vector: np.ndarray) -> list[float]:
    return [float(x) for x in np.asarray(vector, np.float32)]


def as_base64(vector: np.ndarray) -> str:
    """OpenAI's `encoding_format: base64`: the float32 values, little-endian, in base64."""
    return base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode("ascii")
