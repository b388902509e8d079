"""Hypothesis: decode of anything raises only BadFrame; codecs keep their bounds on any input."""

import msgpack
import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import wire
from wire.codecs import TINY, relative_error
from wire.messages.bus import Echo

from .activations import activations
from .declared import Batch, Item, Kitchen, Node, Span
from .frames import pack, unpack_header

FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def decodes_cleanly(frames) -> None:
    """decode either raises BadFrame or gives a Message whose every tensor decodes."""
    try:
        msg = wire.decode(frames)
    except wire.BadFrame as e:
        event(f"BadFrame {e.reason}")  # --hypothesis-show-statistics shows what was reached
        return
    event("decoded")
    for t in tensors(msg.body):
        y = t.array()
        assert y.shape == t.shape


def tensors(obj):
    if isinstance(obj, wire.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from tensors(x)
    elif hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            yield from tensors(getattr(obj, name))


def valid_messages() -> list[list[bytes]]:
    x = activations(3, seed=1)
    bodies = [
        Echo(text="hello", payload=wire.Tensor(x, "fp32")),
        Echo(payload=wire.Tensor(x, "fp16")),
        Echo(payload=wire.Tensor(x, "int8")),
        Echo(payload=wire.Tensor(np.arange(5, dtype=np.int64), "raw")),
        Batch(ids=wire.Tensor(np.arange(3, dtype=np.int32)),
              items=[Item("a", wire.Tensor(x[:1], "int8")), Item("b")]),
        Kitchen(i=1, f=2.0, b=False, s="s", raw=b"r", spans=[Span(0, 1)], weights={"w": 1.0},
                dims=(1, 2), extra={"a": [1, {"b": None}]}, tree=Node("r", (Node("c"),))),
    ]
    return [[bytes(f) for f in wire.encode(wire.Message(b, id=1, sender="s", epoch=2))]
            for b in bodies]


VALID = valid_messages()

msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
    | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12)


# ------------------------------------------------------------------------------ decode


@FUZZ
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_random_bytes(frames):
    decodes_cleanly(frames)


@FUZZ
@given(msgpack_values, st.lists(st.binary(max_size=64), max_size=3))
def test_random_msgpack_headers(value, payload):
    decodes_cleanly([pack(value)] + payload)


@FUZZ
@given(st.sampled_from(range(len(VALID))), st.data())
def test_byte_mutations_of_valid_messages(which, data):
    frames = list(VALID[which])
    i = data.draw(st.integers(0, len(frames) - 1), label="frame")
    f = bytearray(frames[i])
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(len(f) - 1, 0)))
        if op == "flip" and f:
            f[pos] ^= data.draw(st.integers(1, 255))
        elif op == "cut":
            del f[pos:]
        elif op == "insert":
            f[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and f:
            del f[pos]
    frames[i] = bytes(f)
    if data.draw(st.booleans(), label="change frame count"):
        if data.draw(st.booleans()) and len(frames) > 1:
            frames.pop(data.draw(st.integers(1, len(frames) - 1)))
        else:
            frames.append(data.draw(st.binary(max_size=16)))
    decodes_cleanly(frames)


def paths(v, prefix=()):
    """Every (path) to a value inside a decoded header."""
    yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths(x, prefix + (i,))


@FUZZ
@given(st.sampled_from(range(len(VALID))), st.data())
def test_structured_mutations_of_valid_headers(which, data):
    frames = list(VALID[which])
    h = unpack_header(frames[0])
    path = data.draw(st.sampled_from(list(paths(h))[1:]), label="path")
    parent = h
    for k in path[:-1]:
        parent = parent[k]
    op = data.draw(st.sampled_from(["replace", "delete", "add"]), label="op")
    if op == "replace":
        parent[path[-1]] = data.draw(msgpack_values, label="value")
    elif op == "delete":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[data.draw(st.text(max_size=6), label="key")] = data.draw(msgpack_values)
    else:
        parent.append(data.draw(msgpack_values))
    decodes_cleanly([msgpack.packb(h, use_bin_type=True)] + frames[1:])


@FUZZ
@given(st.data())
def test_mutated_tensor_descriptors(data):
    frames = list(VALID[data.draw(st.sampled_from([0, 1, 2, 3]))])
    h = unpack_header(frames[0])
    desc = h["body"]["payload"]
    desc["shape"] = data.draw(st.lists(st.integers(-1, 2**33), max_size=4))
    if data.draw(st.booleans()):
        desc["meta"] = {"block": data.draw(st.integers(-1, 2**21))}
    if data.draw(st.booleans()):
        desc["codec"] = data.draw(st.sampled_from(list(wire.CODECS)))
    if data.draw(st.booleans()):
        desc["dtype"] = data.draw(st.sampled_from(["float32", "float16", "int8", "bool", "x"]))
    if not data.draw(st.booleans(), label="random payload sizes"):
        sizes = data.draw(st.lists(st.integers(0, 4096), min_size=len(frames) - 1,
                                   max_size=len(frames) - 1))
    else:  # the sizes the descriptor asks for, to reach the codecs' decode with odd shapes
        desc["shape"] = data.draw(st.lists(st.integers(0, 70), max_size=4))
        try:
            sizes = wire.CODECS[desc["codec"]].sizes(desc["meta"], desc["dtype"],
                                                     tuple(desc["shape"]))
        except ValueError:
            sizes = [0] * (len(frames) - 1)
        desc["frames"] = list(range(1, 1 + len(sizes)))
    payload = [data.draw(st.binary(min_size=n, max_size=n)) if n < 64 else bytes(n)
               for n in sizes]
    decodes_cleanly([pack(h)] + payload)


# ------------------------------------------------------------------------------ codecs


def round_trip(x: np.ndarray, codec: str):
    t = wire.decode(wire.encode(wire.Message(Echo(payload=wire.Tensor(x, codec))))).body.payload
    return t.array(), t


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40)


@FUZZ
@given(hnp.arrays(np.float32, shapes, elements=st.floats(width=32)))
def test_fp32_round_trips_any_float32_bit_exact(x):
    y, _ = round_trip(x, "fp32")
    assert y.shape == x.shape and np.array_equal(y.view(np.uint32), x.view(np.uint32))


@FUZZ
@given(hnp.arrays(np.float32, shapes, elements=st.floats(width=32)))
def test_fp16_error_bound_on_any_float32(x):
    y, _ = round_trip(x, "fp16")
    assert y.shape == x.shape
    a = np.abs(x)
    finite = np.isfinite(x)
    inside, past = finite & (a <= 65504), finite & (a > 65504)
    assert np.all(np.abs(y[inside] - x[inside]) <= np.maximum(a[inside] * 2.0**-11, 2.0**-25))
    assert np.all(y[past] == np.copysign(np.float32(65504), x[past]))
    assert np.array_equal(y[~finite], x[~finite], equal_nan=True)


@FUZZ
@given(hnp.arrays(np.float32, shapes, elements=st.floats(width=32, allow_nan=False,
                                                         allow_infinity=False)))
def test_int8_error_bound_on_any_finite_float32(x):
    y, t = round_trip(x, "int8")
    assert y.shape == x.shape and np.all(np.isfinite(y))
    if x.size == 0:
        return
    rows = x.reshape(-1, x.shape[-1] if x.ndim else 1)
    err = np.abs(y - x).reshape(rows.shape)
    # Each value is within half a step of its group's scale, and a group's scale is at most
    # the row's: amax / 127 (never below the smallest normal float32).
    step = np.maximum(np.abs(rows).max(axis=1, keepdims=True) / 127, TINY)
    assert np.all(err <= step * 0.5001)


@FUZZ
@given(st.integers(1, 64), st.integers(0, 2**32 - 1), st.integers(0, 16),
       st.floats(5.0, 500.0))
def test_int8_relative_error_on_activation_like_batches(rows, seed, outliers, peak):
    x = activations(rows, seed=seed, outliers=outliers, peak=peak)
    y, t = round_trip(x, "int8")
    assert relative_error(x, y) < 0.015
    # fp16: every value within 2^-11 relative, so the whole is too (one outlier can take it
    # there alone: 76.59 rounds by 0.028, 3.7e-4 of a 1-row batch).
    assert relative_error(x, round_trip(x, "fp16")[0]) < 2.0**-11
