"""Declaring wire messages once: dataclasses whose annotations are the schema.

    @message("bus.heartbeat")
    class Heartbeat:
        state: str
        load: float = 0.0

`message` makes the class a frozen dataclass, registers it by type name and compiles a checker
from its annotations. Supported field types: str, int, float, bool, bytes, Tensor, nested
`record` classes, list[T], dict[str, T], tuple[T, ...] and `T | None`. A class may define
`check(self)` raising ValueError for rules the types cannot say (ranges, enums); a class that
extends a record (dataclass inheritance) inherits its fields, and its own `check` should call
the base's. An error with a `code` attribute becomes the bus error its caller gets.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable

from .errors import BadFrame
from .limits import MAX_LIST, MAX_STR
from .tensor import Tensor

REGISTRY: dict[str, type] = {}

_Conv = Callable[[Any, str], Any]  # (raw value, field path) -> python value


def record(cls: type) -> type:
    """A nested structure inside a message body (not a message of its own)."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    cls.__wire_conv__ = None
    try:
        _compile_record(cls)  # an unsupported field type fails here, not on the first decode
    except NameError:
        cls.__wire_conv__ = None  # a forward reference: compiled on first use instead
    return cls


def message(type_name: str) -> Callable[[type], type]:
    """Declare a message type; the class name is for Python, `type_name` goes on the wire."""

    def wrap(cls: type) -> type:
        if type_name in REGISTRY:
            raise ValueError(f"message type {type_name!r} declared twice")
        cls = record(cls)
        cls.TYPE = type_name
        REGISTRY[type_name] = cls
        return cls

    return wrap


def lookup(type_name: str) -> type:
    try:
        return REGISTRY[type_name]
    except KeyError:
        raise BadFrame("unknown_type", f"no message type {type_name[:60]!r}") from None


# ----------------------------------------------------------------------------------- decode


def from_wire(cls: type, raw: Any, tensors: Callable[[Any, str], Tensor], path: str = "body") -> Any:
    """Build a `cls` from a decoded msgpack value, checking every field; raises BadFrame."""
    return _compile_record(cls)(raw, path, tensors)


def _compile_record(cls: type):
    conv = cls.__dict__.get("__wire_conv__")
    if conv is not None:
        return conv
    check = getattr(cls, "check", None)
    spec: list = []

    def conv(raw, path, tensors):
        if not isinstance(raw, dict):
            raise BadFrame("schema", f"{path}: expected a map, got {type(raw).__name__}")
        kwargs = {}
        for name, fconv, has_default in spec:
            if name in raw:
                kwargs[name] = fconv(raw[name], f"{path}.{name}", tensors)
            elif not has_default:
                raise BadFrame("schema", f"{path}.{name}: required field missing")
        if len(kwargs) != len(raw):
            extra = [k for k in raw if k not in kwargs]
            raise BadFrame("schema", f"{path}: unknown field {str(extra[0])[:40]!r}")
        obj = cls(**kwargs)
        if check is not None:
            try:
                check(obj)
            except ValueError as e:
                # A check may name the refusal its caller should see (a `code` attribute).
                raise BadFrame("schema", f"{path}: {e}",
                               code=getattr(e, "code", None) or "bad_frame") from None
        return obj

    # Set before compiling the fields so that a record containing itself compiles.
    cls.__wire_conv__ = conv
    try:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            has_default = (f.default is not dataclasses.MISSING
                           or f.default_factory is not dataclasses.MISSING)
            spec.append((f.name, _compile(hints[f.name]), has_default))
    except BaseException:
        cls.__wire_conv__ = None
        raise
    return conv


def _compile(tp) -> Callable:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union {tp}")
        sub = _compile(inner[0])
        return lambda v, p, t: None if v is None else sub(v, p, t)
    if origin is list or origin is tuple:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"only tuple[T, ...] is supported, not {tp}")
        sub = _compile(args[0])
        make = list if origin is list else tuple
        plain = _PLAIN_ITEMS.get(args[0])

        def conv_list(v, p, t):
            if not isinstance(v, (list, tuple)):
                raise BadFrame("schema", f"{p}: expected a list, got {type(v).__name__}")
            if len(v) > MAX_LIST:
                raise BadFrame("oversized", f"{p}: list of {len(v)} items")
            # A million token ids checked one call each stalled a service's event loop for
            # seconds (peers took it for dead); a set of item types is one C loop.
            if plain is not None and set(map(type, v)) <= plain:
                return make(v)
            return make(sub(x, f"{p}[{i}]", t) for i, x in enumerate(v))

        return conv_list
    if origin is dict:
        if args[0] is not str:
            raise TypeError("dict keys must be str")
        sub = _compile(args[1])

        def conv_dict(v, p, t):
            if not isinstance(v, dict):
                raise BadFrame("schema", f"{p}: expected a map, got {type(v).__name__}")
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise BadFrame("schema", f"{p}: map key is not a string")
                out[k] = sub(x, f"{p}.{k[:40]}", t)
            return out

        return conv_dict
    if tp is Any:
        return lambda v, p, t: _plain(v, p)
    if tp is Tensor:
        return lambda v, p, t: t(v, p)
    if dataclasses.is_dataclass(tp) and "__wire_conv__" in tp.__dict__:
        _compile_record(tp)
        return lambda v, p, t: _compile_record(tp)(v, p, t)
    if tp is bool:
        return _scalar(bool, (bool,))
    if tp is int:
        return _scalar(int, (int,), exclude_bool=True)
    if tp is float:
        return _scalar(float, (int, float), exclude_bool=True)
    if tp is str:
        return _scalar(str, (str,))
    if tp is bytes:
        return _scalar(bytes, (bytes,))
    raise TypeError(f"unsupported field type {tp!r}")


# Item types a list[T] may hold as decoded, with nothing more to check or convert: what
# `_scalar` accepts as is (a str's length is bounded by msgpack's max_str_len already).
_PLAIN_ITEMS = {int: {int}, float: {float}, str: {str}}
_SCALARS = frozenset({int, float, str, bytes, bool, type(None)})   # to_wire sends these as they are


def _scalar(make, accepted, exclude_bool=False):
    def conv(v, p, t):
        if not isinstance(v, accepted) or (exclude_bool and isinstance(v, bool)):
            raise BadFrame("schema", f"{p}: expected {make.__name__}, got {type(v).__name__}")
        if isinstance(v, (str, bytes)) and len(v) > MAX_STR:
            raise BadFrame("oversized", f"{p}: {len(v)} bytes")
        return make(v)

    return conv


def _plain(v, p):
    """`Any` fields carry plain msgpack data (RPC arguments, JSON-like results)."""
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    if isinstance(v, list):
        return [_plain(x, p) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x, p) for k, x in v.items()}
    raise BadFrame("schema", f"{p}: unsupported value {type(v).__name__}")


# ----------------------------------------------------------------------------------- encode


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}   # of each dataclass type, as to_wire meets them


def _field_names(cls: type) -> tuple[str, ...] | None:
    """The fields of a dataclass type (None for any other type), looked up once per type."""
    try:
        return _FIELD_NAMES[cls]
    except KeyError:
        names = (tuple(f.name for f in dataclasses.fields(cls))
                 if dataclasses.is_dataclass(cls) else None)
        _FIELD_NAMES[cls] = names
        return names


def to_wire(obj: Any, put_tensor: Callable[[Tensor], dict]) -> Any:
    """Turn a message (or any value inside one) into msgpack-ready data."""
    cls = type(obj)
    if cls in _SCALARS:
        return obj
    names = _field_names(cls)
    if names is not None:
        return {name: to_wire(getattr(obj, name), put_tensor) for name in names}
    if isinstance(obj, Tensor):
        return put_tensor(obj)
    if isinstance(obj, (list, tuple)):
        return [to_wire(x, put_tensor) for x in obj]
    if isinstance(obj, dict):
        return {k: to_wire(v, put_tensor) for k, v in obj.items()}
    return obj
