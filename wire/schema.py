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
import functools
import math
import types
import typing
from typing import Any, Callable

from .errors import BadFrame
from .failures import BAD_FRAME
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


def evolve(obj: Any, **changes: Any) -> Any:
    """dataclasses.replace for a record: a copy of `obj` with `changes`, without running every
    field through the frozen __init__ again (a shard hands each batch on with a few fields
    changed, on caches its weights have just evicted). A record with a __post_init__ goes
    through replace, so that it runs."""
    cls = type(obj)
    if not _is_record(cls) or not _plain_init(cls):
        return dataclasses.replace(obj, **changes)
    names = _field_names(cls)
    unknown = changes.keys() - set(names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    d = obj.__dict__
    new = object.__new__(cls)
    new.__dict__.update({n: d[n] for n in names})   # the fields, nothing cached beside them
    new.__dict__.update(changes)
    return new


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
    # Set before compiling the fields so that a record containing itself compiles: the stand-in
    # finds the real converter in cls.__dict__ when it is first called.
    cls.__wire_conv__ = lambda raw, path, tensors: cls.__dict__["__wire_conv__"](raw, path, tensors)
    try:
        conv = _generate_decoder(cls)
    except BaseException:
        cls.__wire_conv__ = None
        raise
    cls.__wire_conv__ = conv
    return conv


@functools.cache
def _plain_init(cls: type) -> bool:
    """Whether an instance of record `cls` is its fields and nothing more, so that one can be
    built by filling its __dict__ (no __post_init__ to run, no field left out of __init__)."""
    return (all(f.init for f in dataclasses.fields(cls)) and not hasattr(cls, "__post_init__")
            and "__slots__" not in cls.__dict__)


def _optional(tp):
    """T of a declared `T | None`; None when `tp` is no union. TypeError for any other union."""
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    inner = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(inner) != 1:
        raise TypeError(f"unsupported union {tp}")
    return inner[0]


_MISSING = object()
# Field types whose decoded msgpack value is taken as is when its type is exactly this (and a str
# no longer than MAX_STR): the common case, checked inline; anything else goes through the
# field's full converter, which converts (an int where a float is declared) or refuses.
_EXACT = {int: "int", float: "float", str: "str", bool: "bool", bytes: "bytes"}


def _generate_decoder(cls: type):
    """One function per record: each field read, checked and defaulted in a straight line.

    A record's fields are a decode step of every message, and a shard runs a batch's header
    through it at every hop, on caches its own weights have just evicted. A loop over a field
    table, with a converter call and a path string per field, made that decode half as slow
    again."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    ns: dict[str, Any] = {"_M": _MISSING, "_cls": cls, "_new": object.__new__, "BadFrame": BadFrame,
                          "_check": getattr(cls, "check", None), "MAX_STR": MAX_STR,
                          "_unknown": _unknown_field, "BAD_FRAME": BAD_FRAME}
    lines = ["def conv(raw, path, tensors):",
             "    if type(raw) is not dict and not isinstance(raw, dict):",
             "        raise BadFrame('schema', f'{path}: expected a map, got {type(raw).__name__}')",
             "    get = raw.get",
             "    n = 0"]
    for i, f in enumerate(fields):
        tp = hints[f.name]
        ns[f"_c{i}"] = _compile(tp)
        lines.append(f"    v = get({f.name!r}, _M)")
        lines.append("    if v is _M:")
        if f.default is not dataclasses.MISSING:
            ns[f"_d{i}"] = f.default
            lines.append(f"        v = _d{i}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"_f{i}"] = f.default_factory
            lines.append(f"        v = _f{i}()")
        else:
            lines.append(f"        raise BadFrame('schema', path + {'.' + f.name + ': required field missing'!r})")
        lines.append("    else:")
        lines.append("        n += 1")
        fast = _fast_test(tp)
        slow = f"v = _c{i}(v, path + {'.' + f.name!r}, tensors)"
        lines.append(f"        if not ({fast}): {slow}" if fast else f"        {slow}")
        lines.append(f"    a{i} = v")
    lines.append("    if n != len(raw):")
    lines.append(f"        _unknown(raw, path, {tuple(f.name for f in fields)!r})")
    if _plain_init(cls):   # a frozen dataclass's __init__ sets each field through object.__setattr__
        lines.append("    obj = _new(_cls)")
        lines.append("    obj.__dict__.update({" + ", ".join(f"{f.name!r}: a{i}" for i, f in enumerate(fields))
                     + "})")
    else:
        lines.append("    obj = _cls(" + ", ".join(f"{f.name}=a{i}" for i, f in enumerate(fields)) + ")")
    lines += ["    if _check is not None:",
              "        try:",
              "            _check(obj)",
              "        except ValueError as e:",
              "            # A check may name the refusal its caller should see (a `code` attribute).",
              "            raise BadFrame('schema', f'{path}: {e}',",
              "                           code=getattr(e, 'code', None) or BAD_FRAME) from None",
              "    return obj"]
    exec("\n".join(lines), ns)
    return ns["conv"]


def _fast_test(tp) -> str | None:
    """A Python expression on `v` true when the decoded value needs no conversion and no more
    checks as the field's type `tp`; None when every value goes through the full converter."""
    inner = _optional(tp)
    if inner is not None:
        test = _fast_test(inner)
        return f"v is None or ({test})" if test else "v is None"
    name = _EXACT.get(tp)
    if name is None:
        return None
    if tp is str or tp is bytes:
        return f"type(v) is {name} and len(v) <= MAX_STR"
    return f"type(v) is {name}"


def _unknown_field(raw: dict, path: str, names: tuple[str, ...]) -> None:
    extra = [k for k in raw if k not in names]
    raise BadFrame("schema", f"{path}: unknown field {str(extra[0])[:40]!r}")


def _compile(tp) -> Callable:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    inner = _optional(tp)
    if inner is not None:
        sub = _compile(inner)
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
        plain = _PLAIN_ITEMS.get(args[1])

        def conv_dict(v, p, t):
            if not isinstance(v, dict):
                raise BadFrame("schema", f"{p}: expected a map, got {type(v).__name__}")
            if plain is not None and set(map(type, v)) <= _STR_KEYS and set(map(type, v.values())) <= plain:
                return dict(v)   # str keys and plain values (a stage's timings): one C loop each
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
    if dataclasses.is_dataclass(tp) and _is_record(tp):
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
_STR_KEYS = {str}
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
_ENCODERS: dict[type, Callable] = {}              # of each record type, generated on first use


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
    if cls in _ENCODERS or "__wire_conv__" in cls.__dict__:
        return _encoder(cls)(obj, put_tensor)
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


def _encoder(cls: type) -> Callable:
    """A record's to_wire in one expression: a field whose declared type is plain data (scalars,
    and lists and maps of them) goes out as it is; a Tensor through put_tensor; a record, or a
    list of them, through that record's encoder; anything else through to_wire. Made once per
    record type, on first use."""
    enc = _ENCODERS.get(cls)
    if enc is not None:
        return enc
    hints = typing.get_type_hints(cls)
    ns: dict[str, Any] = {"to_wire": to_wire, "Tensor": Tensor}
    parts = []
    for i, f in enumerate(dataclasses.fields(cls)):
        tp, get = hints[f.name], f"obj.{f.name}"
        if _is_plain(tp):
            parts.append(f"{f.name!r}: {get}")
            continue
        tp = _optional(tp) or tp
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp is Tensor:
            ns[f"_e{i}"] = lambda v, put: put(v) if type(v) is Tensor else to_wire(v, put)
        elif _is_record(tp):
            ns[f"_e{i}"] = _record_item(tp)
        elif origin in (list, tuple) and _is_record(args[0]):
            ns[f"_e{i}"] = _record_list(args[0])
        else:
            ns[f"_e{i}"] = to_wire
        parts.append(f"{f.name!r}: _e{i}({get}, put)")
    exec("def enc(obj, put):\n    return {" + ", ".join(parts) + "}", ns)
    _ENCODERS[cls] = ns["enc"]
    return ns["enc"]


def _is_record(tp) -> bool:
    return "__wire_conv__" in getattr(tp, "__dict__", {})


def _record_item(tp: type) -> Callable:
    """to_wire for a value declared as record `tp` (None included): its encoder when it is one.
    The encoder is looked up when called: a record that contains itself has none yet here."""
    def item(v, put):
        return _encoder(tp)(v, put) if type(v) is tp else to_wire(v, put)
    return item


def _record_list(tp: type) -> Callable:
    """to_wire for a value declared as a list (or tuple) of record `tp`."""
    item = _record_item(tp)

    def items(v, put):
        return [item(x, put) for x in v] if isinstance(v, (list, tuple)) else to_wire(v, put)
    return items


def _is_plain(tp) -> bool:
    """Whether every value of declared type `tp` is msgpack-ready as it is."""
    if tp in _SCALARS:
        return True
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType, list, tuple):
        return all(a is Ellipsis or _is_plain(a) for a in args)
    if origin is dict:
        return _is_plain(args[1])
    return False


# ----------------------------------------------------------------------------------- nesting


_NESTING: dict[Any, float] = {}


def nesting(tp) -> float:
    """How deep the maps and lists of a valid value of declared type `tp` can nest (0 for a
    scalar, math.inf where nothing bounds it: `Any`, a record that contains itself).

    A message whose body type nests no deeper than limits.MAX_DEPTH needs no walk over its
    decoded body to enforce that limit: its schema does, since from_wire checks every level."""
    try:
        return _NESTING[tp]
    except KeyError:
        pass
    _NESTING[tp] = math.inf          # while this type is measured: a cycle through it is unbounded
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in _SCALARS:
        depth = 0.0
    elif tp is Tensor:
        depth = 2.0                  # {codec, dtype, shape: [...], meta: {scalars}, frames: [...]}
    elif origin in (typing.Union, types.UnionType):
        depth = max(nesting(a) for a in args)
    elif origin in (list, tuple):
        depth = 1 + nesting(args[0])
    elif origin is dict:
        depth = 1 + nesting(args[1])
    elif dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        depth = 1 + max((nesting(hints[f.name]) for f in dataclasses.fields(tp)), default=0.0)
    else:                            # Any
        depth = math.inf
    _NESTING[tp] = depth
    return depth
