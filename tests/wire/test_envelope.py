"""The envelope: header fields, frame layout, zero-copy decoding, forwarding received tensors."""

import numpy as np
import pytest

import wire
from wire.messages.bus import Echo, EchoReply, Error, Heartbeat, Hello, Status

from .activations import activations
from .frames import unpack_header


def test_header_fields_round_trip():
    msg = wire.Message(Hello(cluster="lab"), id=2**64 - 1, sender="shard-0", epoch=12345,
                       deadline=1.7e9)
    frames = wire.encode(msg)
    assert len(frames) == 1
    back = wire.decode(frames)
    assert back == msg and back.type == "bus.hello"


def test_header_is_exactly_the_documented_map():
    frames = wire.encode(wire.Message(Echo(text="x"), id=1, sender="a", epoch=2, deadline=3.0))
    assert unpack_header(frames[0]) == {
        "version": 1, "type": "bus.echo", "id": 1, "sender": "a", "epoch": 2, "deadline": 3.0,
        "body": {"text": "x", "payload": None}}


def test_every_bus_message_round_trips():
    info = {"model": "m", "layers": [0, 15]}   # a shard's info record (wire.messages.info)
    data = {"n": 1, "nested": {"a": [1, 2.5, "x", None, True, b"\x00"]}}
    bodies = [
        Hello(cluster="c"), Status(), Echo(), EchoReply(text="t"),
        Error(code="QueueFull", message="try later", retry_after=0.5),
        Error(code="BadFrame", message="m"),
        Heartbeat(name="n", kind="shard", instance="i", epoch=1, state="ready", load=0.5,
                  progress=9, seq=3, host="h", rpc_port=1, pub_port=2, info=info),
        wire.messages.bus.Welcome(name="n", kind="shard", instance="i", epoch=1, cluster="c",
                                  host="h", rpc_port=1, pub_port=2, state="ready", info=info),
        wire.messages.bus.StatusReply(name="n", kind="k", instance="i", epoch=1, host="h",
                                      rpc_port=1, pub_port=2, state="ready",
                                      load=1.0, progress=2, uptime=3.5, counters={"bad": 4},
                                      info={}),
        wire.messages.bus.Event(topic="respawned", service="shard-1", data=data),
    ]
    for body in bodies:
        msg = wire.Message(body, id=5, sender="s", epoch=6)
        assert wire.decode(wire.encode(msg)) == msg


def test_tensor_descriptor_names_its_frame():
    x = activations(2)
    frames = wire.encode(wire.Message(Echo(payload=wire.Tensor(x, "int8"))))
    desc = unpack_header(frames[0])["body"]["payload"]
    assert desc == {"codec": "int8", "dtype": "float32", "shape": [2, 576],
                    "meta": {"block": 32}, "frames": [1, 2]}
    assert len(frames) == 3 and len(frames[1]) == 2 * 576 and len(frames[2]) == 2 * 18 * 4


def test_encode_does_not_copy_fp32_payloads():
    x = activations(4)
    frames = wire.encode(wire.Message(Echo(payload=wire.Tensor(x, "fp32"))))
    assert np.shares_memory(np.frombuffer(frames[1], np.uint8), x)


@pytest.mark.parametrize("codec,dtype", [("fp32", np.float32), ("raw", np.int32),
                                         ("raw", np.float64)])
def test_decode_does_not_copy_fp32_or_raw_payloads(codec, dtype):
    x = activations(4).astype(dtype)
    frames = [bytearray(f) for f in wire.encode(wire.Message(Echo(payload=wire.Tensor(x, codec))))]
    y = wire.decode(frames).body.payload.array()
    received = np.frombuffer(frames[1], np.uint8)
    assert np.shares_memory(y, received)
    frames[1][:4] = b"\xff\xff\xff\xff"  # the array is a view: it sees the frame's bytes change
    assert y.reshape(-1).view(np.uint8)[0] == 0xFF


def test_decode_accepts_bytes_memoryview_and_bytearray_frames():
    x = activations(2)
    frames = wire.encode(wire.Message(Echo(payload=wire.Tensor(x, "fp16"))))
    for kind in (bytes, bytearray, memoryview):
        y = wire.decode([kind(bytes(f)) for f in frames]).body.payload.array()
        assert np.allclose(y, x, rtol=2**-11)


def test_multiple_tensors_take_their_own_frames():
    from .declared import Batch, Item
    a = np.arange(6, dtype=np.int32)
    items = [Item(name=str(i), x=wire.Tensor(activations(1, seed=i), c))
             for i, c in enumerate(["fp32", "fp16", "int8"])]
    msg = wire.Message(Batch(ids=wire.Tensor(a), items=items))
    frames = wire.encode(msg)
    assert len(frames) == 1 + 1 + 1 + 1 + 2
    back = wire.decode([bytes(f) for f in frames]).body
    assert np.array_equal(back.ids.array(), a)
    assert np.array_equal(back.items[0].x.array(), items[0].x.array())
    assert np.allclose(back.items[1].x.array(), items[1].x.array(), rtol=2**-11)
    assert [i.x.codec for i in back.items] == ["fp32", "fp16", "int8"]


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8", "raw"])
def test_forwarding_a_received_tensor_sends_its_frames_unchanged(codec):
    # An echo (or a relay) must not decode and re-quantize what it passes on.
    x = activations(3, seed=4)
    sent = wire.encode(wire.Message(Echo(payload=wire.Tensor(x, codec)), id=9))
    got = wire.decode([bytes(f) for f in sent])
    reply = wire.encode(got.reply(EchoReply(payload=got.body.payload), sender="srv", epoch=4))
    assert [bytes(f) for f in reply[1:]] == [bytes(f) for f in sent[1:]]
    back = wire.decode(reply)
    assert back.id == 9 and back.sender == "srv" and back.epoch == 4
    assert back.body.payload == got.body.payload


def test_received_tensor_reports_its_wire_size():
    x = activations(2)
    t = wire.decode(wire.encode(wire.Message(Echo(payload=wire.Tensor(x, "fp16"))))).body.payload
    assert t.is_received and t.nbytes_on_wire == 2 * x.size
    assert not wire.Tensor(x, "fp16").is_received


def test_encode_refuses_an_undeclared_body():
    class NotAMessage:
        pass
    with pytest.raises(TypeError):
        wire.encode(wire.Message(NotAMessage()))


def test_encode_refuses_a_header_the_receiver_would_drop():
    from wire.errors import Oversized
    from wire.limits import MAX_HEADER_BYTES
    fits = wire.encode(wire.Message(Echo(text="x" * (MAX_HEADER_BYTES - 100))))
    assert len(fits[0]) <= MAX_HEADER_BYTES
    wire.decode(fits)
    with pytest.raises(Oversized) as e:
        wire.encode(wire.Message(Echo(text="x" * MAX_HEADER_BYTES)))
    assert e.value.what == "header" and e.value.limit == MAX_HEADER_BYTES
    assert e.value.size > MAX_HEADER_BYTES


def test_encode_refuses_a_frame_over_the_sockets_limit_and_too_many_frames():
    from wire.errors import Oversized
    from wire.limits import MAX_FRAMES
    from .declared import Batch, Item
    x = np.zeros(1001, np.uint8)
    assert len(wire.encode(wire.Message(Echo(payload=wire.Tensor(x, "raw"))),
                           max_frame_bytes=1001)[1]) == 1001
    with pytest.raises(Oversized) as e:
        wire.encode(wire.Message(Echo(payload=wire.Tensor(x, "raw"))), max_frame_bytes=1000)
    assert (e.value.what, e.value.size, e.value.limit) == ("frame 1", 1001, 1000)
    many = Batch(ids=wire.Tensor(np.zeros(1, np.int32)),
                 items=[Item(name=str(i), x=wire.Tensor(activations(1), "fp32"))
                        for i in range(MAX_FRAMES)])
    with pytest.raises(Oversized) as e:
        wire.encode(wire.Message(many))
    assert e.value.what == "frames" and e.value.limit == MAX_FRAMES
