"""Every kind of bad input raises exactly BadFrame, with a reason a service can count."""

import tracemalloc

import msgpack
import numpy as np
import pytest

import wire
from wire import limits

from .activations import activations
from .frames import descriptor, echo_frames, header, pack, unpack_header


def bad(frames, reason: str) -> wire.BadFrame:
    with pytest.raises(wire.BadFrame) as e:
        wire.decode(frames)
    assert type(e.value) is wire.BadFrame
    assert e.value.reason == reason, str(e.value)
    return e.value


def with_payload(desc: dict, *payload: bytes) -> list:
    return [pack(header({"payload": desc}))] + list(payload)


# ------------------------------------------------------------------------- frame level


def test_no_frames():
    bad([], "frame_count")


def test_too_many_frames():
    bad([pack(header())] + [b""] * limits.MAX_FRAMES, "frame_count")


@pytest.mark.parametrize("frame", ["text", 5, None, object()])
def test_a_frame_that_is_not_bytes(frame):
    bad([pack(header()), frame] if frame != "text" else [frame], "malformed")


@pytest.mark.parametrize("cut", [1, 10, -1])
def test_truncated_header(cut):
    frames = echo_frames(activations(2), "fp32")
    bad([frames[0][:cut]] + frames[1:], "malformed")


def test_header_with_trailing_bytes():
    frames = echo_frames(activations(2), "fp32")
    bad([frames[0] + b"\x00"] + frames[1:], "malformed")


@pytest.mark.parametrize("garbage", [b"", b"\xc1", b"\xff" * 40, b"GET / HTTP/1.1\r\n\r\n",
                                     bytes(range(256))])
def test_garbage_bytes(garbage):
    with pytest.raises(wire.BadFrame):
        wire.decode([garbage])


def test_oversized_header():
    bad([pack(header(text="x" * limits.MAX_HEADER_BYTES))], "oversized")


def test_an_oversized_header_names_its_call_so_the_caller_gets_the_error():
    big = {"text": "x" * limits.MAX_HEADER_BYTES}
    assert bad([pack(header(big, id=2**64 - 1))], "oversized").msg_id == 2**64 - 1
    # No id before the body, or an id that is no id: the reply can name no call.
    late = {k: v for k, v in header(big, id=9).items() if k != "id"} | {"id": 9}
    assert bad([pack(late)], "oversized").msg_id == 0
    assert bad([pack(header(big, id=-3))], "oversized").msg_id == 0
    assert bad([b"\x87" + b"\xc1" * limits.MAX_HEADER_BYTES], "oversized").msg_id == 0


def test_a_body_nested_too_deep_names_its_call():
    body = {"text": "x"}
    for _ in range(limits.MAX_DEPTH + 1):
        body = {"k": body}
    assert bad([pack(header(body, id=5))], "oversized").msg_id == 5


@pytest.mark.parametrize("depth,reason", [(3, "schema"), (limits.MAX_DEPTH + 1, "oversized"),
                                          (500, "oversized"), (100_000, "malformed")])
def test_deeply_nested_msgpack(depth, reason):
    # The header map with its body {"text": [[[...1...]]]} spelled out byte by byte: 100k
    # nested one-element arrays are 100 kB, under the header size limit.
    head = pack({k: v for k, v in header().items() if k != "body"})
    nested = b"\x91" * depth + b"\x01"
    frame = bytes([head[0] + 1]) + head[1:] + pack("body") + b"\x81" + pack("text") + nested
    bad([frame], reason)  # past msgpack's own stack limit the unpacker refuses it


@pytest.mark.parametrize("claim", [b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff",
                                   b"\xdb\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff"])
def test_msgpack_length_claims_allocate_nothing(claim):
    # array32 / map32 / str32 / bin32 claiming 4G items with nothing behind them
    tracemalloc.start()
    try:
        with pytest.raises(wire.BadFrame) as e:
            wire.decode([claim + b"\x00" * 16])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.reason == "malformed" and peak < 1 << 20


def test_nesting_inside_any_fields_is_limited_too():
    nested: object = "leaf"
    for _ in range(limits.MAX_DEPTH + 2):
        nested = {"k": nested}
    h = header({"topic": "t", "service": "s", "data": nested}, type="bus.event")
    bad([pack(h)], "oversized")


# ----------------------------------------------------------------------------- header


@pytest.mark.parametrize("value", [[1, 2], 5, "header", b"bytes", None, 1.5])
def test_header_that_is_not_a_map(value):
    bad([pack(value)], "schema")


@pytest.mark.parametrize("key", ["version", "type", "id", "sender", "epoch", "deadline", "body"])
def test_header_missing_a_key(key):
    h = header()
    del h[key]
    bad([pack(h)], "schema")


def test_header_with_an_extra_key():
    bad([pack(header(trace="abc"))], "schema")


@pytest.mark.parametrize("version", [0, 2, 2**40, True, 1.0, "1", None])
def test_unknown_version(version):
    bad([pack(header(version=version))], "version")


@pytest.mark.parametrize("type_name", ["bus.nope", "", "x" * 10_000])
def test_unknown_type(type_name):
    e = bad([pack(header(type=type_name))], "unknown_type")
    assert len(str(e)) < 200  # a hostile name is not echoed in full into logs


@pytest.mark.parametrize("field,value", [
    ("type", 5), ("id", -1), ("id", 1.0), ("id", True), ("id", "7"), ("sender", 5),
    ("sender", "s" * 257), ("epoch", -1), ("epoch", None), ("deadline", -1.0),
    ("deadline", float("nan")), ("deadline", float("inf")), ("deadline", "soon"),
    ("deadline", False),
])
def test_bad_header_field(field, value):
    bad([pack(header(**{field: value}))], "schema")


def test_non_utf8_string_and_extension_types():
    frame = pack(header(sender="ab")).replace(b"\xa2ab", b"\xa2\xff\xfe")
    bad([frame], "malformed")
    frame = msgpack.packb(header(text=msgpack.ExtType(5, b"x")))
    bad([frame], "malformed")


def test_non_string_header_key():
    frame = msgpack.packb({1: 2}, strict_types=False)
    bad([frame], "malformed")  # msgpack with strict_map_key refuses it before we look


# --------------------------------------------------------------------- payload frames


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8"])
def test_truncated_payload_frame(codec):
    frames = echo_frames(activations(2), codec)
    bad(frames[:1] + [frames[1][:-1]] + frames[2:], "truncated")


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8"])
def test_payload_frame_with_an_extra_byte(codec):
    frames = echo_frames(activations(2), codec)
    bad(frames[:-1] + [frames[-1] + b"\x00"], "truncated")


@pytest.mark.parametrize("codec", ["fp32", "int8"])
def test_missing_payload_frame(codec):
    frames = echo_frames(activations(2), codec)
    bad(frames[:-1], "frame_count")


def test_extra_payload_frame():
    frames = echo_frames(activations(2), "fp32")
    bad(frames + [b"\x00" * 8], "frame_count")
    h = pack(header({"text": "no tensor"}))
    bad([h, b"stray"], "frame_count")


@pytest.mark.parametrize("frames_field", [[0], [2], [-1], [1, 1], ["1"], 1, [], [1.0], [True]])
def test_bad_frame_index(frames_field):
    x = activations(1)
    desc = descriptor(shape=(1, 576), frames=[1])
    desc["frames"] = frames_field
    bad(with_payload(desc, x.tobytes()), "frame_count")


def test_two_tensors_cannot_share_a_frame():
    from .declared import Item
    payload = np.zeros(4, np.float32).tobytes()
    d = descriptor(shape=(4,))
    h = header({"ids": descriptor("raw", (4,), "float32"),
                "items": [wire.schema.to_wire(Item(name="a"), None) | {"x": d}]},
               type="test.wire.batch")
    bad([pack(h), payload], "frame_count")


@pytest.mark.parametrize("shape", [(1 << 16, 1 << 16), (1 << 32,), (1 << 28,)])
def test_header_claiming_huge_tensors_allocates_nothing(shape):
    desc = descriptor(shape=shape)                              # 2^32 float32 values: 16 GiB
    frames = with_payload(desc, b"\x00" * 16)
    tracemalloc.start()
    try:
        with pytest.raises(wire.BadFrame) as e:
            wire.decode(frames)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.reason in ("oversized", "truncated")  # by shape, or by the frame's size
    assert peak < 1 << 20


def test_descriptor_past_the_tensor_limit_is_refused_before_its_frame_is_read():
    desc = descriptor(shape=(limits.MAX_TENSOR_BYTES // 4 + 1,))
    bad(with_payload(desc, b""), "truncated")


def test_int8_header_with_a_huge_block_allocates_nothing_on_decode():
    # 1000 rows of 1 value with block 2^20 once made dequantize spell out 4 GB of scales.
    desc = descriptor("int8", shape=(1000, 1), meta={"block": 1 << 20}, frames=[1, 2])
    t = wire.decode(with_payload(desc, bytes(1000), bytes(4000))).body.payload
    tracemalloc.start()
    try:
        y = t.array()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert y.shape == (1000, 1) and peak < 1 << 20


@pytest.mark.parametrize("shape", [[1 << 39, 0, 1 << 39], [0] + [1 << 20] * 5])
def test_empty_shape_whose_other_dims_overflow(shape):
    bad(with_payload(descriptor(shape=shape), b""), "oversized")


# ------------------------------------------------------------------ tensor descriptors


@pytest.mark.parametrize("change", [
    {"codec": "bf16"}, {"codec": 5}, {"dtype": "int32"}, {"dtype": "complex64"},
    {"dtype": 4}, {"shape": [2, -1]}, {"shape": [2.0, 576]}, {"shape": [True, 576]},
    {"shape": [1] * (limits.MAX_TENSOR_DIMS + 1)}, {"shape": "2x576"}, {"shape": [1 << 40]},
    {"meta": {"scale": 1.0}}, {"meta": []},
])
def test_bad_fp32_descriptor(change):
    desc = descriptor(shape=(2, 576)) | change
    bad(with_payload(desc, activations(2).tobytes()), "schema")


@pytest.mark.parametrize("meta", [{}, {"block": -1}, {"block": 1.5}, {"block": True},
                                  {"block": "32"}, {"block": 1 << 21}, {"block": 32, "x": 1}])
def test_bad_int8_meta(meta):
    frames = echo_frames(activations(2), "int8")
    h = unpack_header(frames[0])
    h["body"]["payload"]["meta"] = meta
    bad([pack(h)] + frames[1:], "schema")


@pytest.mark.parametrize("desc", [5, "tensor", [1, 2], {"codec": "fp32"},
                                  descriptor() | {"extra": 1}])
def test_not_a_descriptor(desc):
    bad(with_payload(desc, activations(2).tobytes()), "schema")


def test_raw_dtype_must_be_one_we_carry():
    desc = descriptor("raw", shape=(2,), dtype="object")
    bad(with_payload(desc, bytes(16)), "schema")
