"""Reading a request's JSON body under a size limit and a deadline (a slow client cannot hold
a connection, a huge one cannot fill memory)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from aiohttp import web

from wire.limits import MAX_DEPTH

from .crosssite import body_refusal
from .errors import BadRequest, BodyTooLarge, RequestTimeout, UnsupportedMediaType

# A body larger than this is parsed in a worker thread: the event loop (other requests,
# /health) goes on meanwhile.
PARSE_IN_THREAD_BYTES = 64 << 10
# How deep a body's arrays and objects may nest: what the bus carries of a request's free-form
# parts (a tool's JSON schema, a response format) within the levels around them on the bus.
MAX_NESTING = MAX_DEPTH - 8


async def read_json(request: web.Request, limit: int, timeout: float) -> Any:
    """The parsed body; 415 unless declared JSON (see crosssite.body_refusal), 413 past `limit`
    bytes (refused from Content-Length before reading), 408 if it does not arrive within
    `timeout` seconds, 400 if it is not JSON or holds what the bus cannot carry (see `parse`)."""
    if (why := body_refusal(request.headers.get("Content-Type"),
                            request.headers.get("Origin"))) is not None:
        raise UnsupportedMediaType(why)
    declared = request.content_length
    if declared is not None and declared > limit:
        raise BodyTooLarge(f"the body is {declared} bytes; the limit is {limit}")
    try:
        raw = await asyncio.wait_for(_read_at_most(request, limit), timeout)
    except asyncio.TimeoutError:
        raise RequestTimeout(f"the body did not arrive within {timeout:g} s") from None
    if not raw.strip():
        raise BadRequest("the body is empty; send a JSON object")
    if len(raw) > PARSE_IN_THREAD_BYTES:
        return await asyncio.to_thread(parse, raw)
    return parse(raw)


# msgpack carries integers in [-2**63, 2**64) and strings that are UTF-8; JSON also allows
# larger integers and escapes of unpaired UTF-16 surrogates ("\\udb92"), which would reach the
# bus's packer (as free-form tool schemas and message text do) and fail there as a 500.
_INT_LO, _INT_HI = -(2 ** 63), 2 ** 64 - 1
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _Uncarriable(ValueError):
    pass


def _int(text: str) -> int:
    n = int(text)
    if not _INT_LO <= n <= _INT_HI:
        raise _Uncarriable(f"the body holds the integer {text}, beyond the 64 bits a request "
                           f"can carry; write it as a number with a decimal point")
    return n


def parse(raw: bytes) -> Any:
    """JSON text as a request's value, every part of it something the bus can carry."""
    try:
        value = json.loads(raw, parse_int=_int)
        if _SURROGATE_ESCAPE.search(raw):  # paired surrogates decode to text; look for lone ones
            _check_text(value)
    except _Uncarriable as e:
        raise BadRequest(str(e)) from None
    except (UnicodeDecodeError, ValueError) as e:
        raise BadRequest(f"the body is not valid JSON: {e}") from None
    except RecursionError:
        raise BadRequest(f"the body nests arrays and objects too deeply (deeper than "
                         f"{MAX_NESTING} levels)") from None
    _check_nesting(value)
    return value


def _check_nesting(value: Any) -> None:
    """BadRequest naming the first field whose arrays and objects nest past MAX_NESTING (walked
    without recursion: the walk itself cannot overflow)."""
    todo = [(value, "", 0)]
    while todo:
        v, path, depth = todo.pop()
        if isinstance(v, dict):
            items = v.items()
        elif isinstance(v, list):
            items = enumerate(v)
        else:
            continue
        if depth >= MAX_NESTING:
            field = path.split(".")[0].split("[")[0] or None
            raise BadRequest(f"{path} nests arrays and objects deeper than the {MAX_NESTING} "
                             f"levels a request may have", param=field)
        for k, item in items:
            if isinstance(item, (dict, list)):
                name = f"{path}[{k}]" if isinstance(v, list) else (f"{path}.{k}" if path else k)
                todo.append((item, name, depth + 1))


def _check_text(value: Any, path: str = "") -> None:
    """BadRequest naming the first string (key or value) under `path` that is not text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise BadRequest(f"{path or 'the body'} holds an unpaired UTF-16 surrogate "
                             f"(\\u{ord(value[e.start]):04x}), which is not text") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_text(k, f"a key in {path or 'the body'}")
            _check_text(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_text(v, f"{path}[{i}]")


async def _read_at_most(request: web.Request, limit: int) -> bytes:
    chunks, size = [], 0
    while chunk := await request.content.read(65536):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
