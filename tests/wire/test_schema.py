"""Declaring messages: nested records, containers, optionals, check() hooks, registration."""

import dataclasses
import math

import pytest

import wire
from wire.schema import REGISTRY

from .declared import Kitchen, Node, Span, Window, Windowed
from .frames import header, pack


def kitchen(**over) -> Kitchen:
    fields = dict(i=3, f=0.5, b=True, s="é", raw=b"\x00\xff", spans=[Span(0, 2), Span(2, 2)],
                  weights={"a": 1.0, "b": -2.5}, dims=(2, 576), maybe=None, nested=Span(1, 4),
                  extra={"k": [1, "two", None]},
                  tree=Node("root", (Node("a"), Node("b", (Node("c"),)))))
    fields.update(over)
    return Kitchen(**fields)


def decode_body(body: dict, type_name: str = "test.wire.kitchen"):
    return wire.decode([pack(header(body, type=type_name))]).body


def wire_body(obj) -> dict:
    return wire.schema.to_wire(obj, lambda t: pytest.fail("no tensors here"))


def test_every_field_kind_round_trips():
    k = kitchen()
    back = wire.decode(wire.encode(wire.Message(k))).body
    assert back == k
    assert isinstance(back.dims, tuple) and isinstance(back.spans, list)
    assert isinstance(back.tree.children, tuple) and back.tree.children[1].children[0].label == "c"


def test_declared_classes_are_frozen_dataclasses_registered_by_type():
    assert REGISTRY["test.wire.kitchen"] is Kitchen and Kitchen.TYPE == "test.wire.kitchen"
    with pytest.raises(dataclasses.FrozenInstanceError):
        kitchen().i = 4


def test_an_int_is_accepted_where_a_float_is_declared():
    back = decode_body(wire_body(kitchen(f=2)))
    assert back.f == 2.0 and isinstance(back.f, float)


@pytest.mark.parametrize("field,value", [
    ("i", "3"), ("i", 1.5), ("i", True), ("f", "x"), ("f", None), ("b", 1), ("s", b"bytes"),
    ("raw", "str"), ("spans", {"start": 0}), ("spans", [[0, 1]]), ("weights", [1.0]),
    ("weights", {"a": "heavy"}), ("dims", 5), ("dims", [1, "2"]), ("maybe", "one"),
    ("nested", 5), ("extra", [1]), ("tree", {"label": 5}), ("tree", {"label": "r", "children": [7]}),
])
def test_wrong_field_type_is_a_bad_frame(field, value):
    body = wire_body(kitchen())
    body[field] = value
    with pytest.raises(wire.BadFrame) as e:
        decode_body(body)
    assert e.value.reason == "schema" and field in str(e.value)


def test_missing_required_field_is_a_bad_frame_and_defaults_fill_optional_ones():
    body = wire_body(kitchen())
    for optional in ("maybe", "nested", "extra", "tree"):
        del body[optional]
    back = decode_body(body)
    assert back.maybe is None and back.tree is None
    del body["spans"]
    with pytest.raises(wire.BadFrame, match="spans: required field missing"):
        decode_body(body)


def test_missing_field_of_a_nested_record_is_a_bad_frame():
    body = wire_body(kitchen())
    del body["spans"][1]["stop"]
    with pytest.raises(wire.BadFrame, match=r"spans\[1\]\.stop"):
        decode_body(body)


@pytest.mark.parametrize("where", ["top", "nested"])
def test_unknown_field_is_a_bad_frame(where):
    body = wire_body(kitchen())
    (body if where == "top" else body["nested"])["surprise"] = 1
    with pytest.raises(wire.BadFrame, match="unknown field 'surprise'"):
        decode_body(body)


def test_check_hooks_turn_value_errors_into_bad_frames():
    body = wire_body(kitchen())
    body["i"] = -1
    with pytest.raises(wire.BadFrame, match="i must be non-negative") as e:
        decode_body(body)
    assert e.value.reason == "schema"
    body = wire_body(kitchen())
    body["spans"][0] = {"start": 5, "stop": 1}           # a nested record's own check
    with pytest.raises(wire.BadFrame, match=r"body.spans\[0\]: bad span"):
        decode_body(body)


def test_a_message_extending_a_record_carries_its_fields_flat_and_runs_both_checks():
    w = Windowed(lo=2, hi=5, name="w")
    assert wire_body(w) == {"lo": 2, "hi": 5, "name": "w"}
    assert wire.decode(wire.encode(wire.Message(w))).body == w
    assert decode_body({"name": "d"}, "test.wire.windowed") == Windowed(0, 10, "d")
    with pytest.raises(wire.BadFrame, match="window") as e:        # the record's check
        decode_body({"lo": 7, "hi": 3, "name": "w"}, "test.wire.windowed")
    assert e.value.code == "bad_range" and e.value.reason == "schema"
    with pytest.raises(wire.BadFrame, match="name must not be empty") as e:   # its own
        decode_body({"lo": 1, "hi": 3}, "test.wire.windowed")
    assert e.value.code == "bad_frame"
    with pytest.raises(wire.BadFrame, match="unknown field"):
        decode_body({"lo": 1, "name": "w", "width": 3}, "test.wire.windowed")
    assert issubclass(Windowed, Window)


def test_bus_heartbeat_state_is_checked():
    from wire.messages.bus import Heartbeat
    hb = Heartbeat(name="n", kind="k", instance="i", epoch=1, state="dancing", load=0.0,
                   progress=0, seq=0, host="h", rpc_port=1, pub_port=2, info={})
    with pytest.raises(wire.BadFrame, match="unknown state 'dancing'"):
        wire.decode(wire.encode(wire.Message(hb)))


def test_dict_keys_must_be_strings():
    body = wire_body(kitchen())
    body["weights"] = {b"bin": 1.0}
    with pytest.raises(wire.BadFrame, match="map key is not a string"):
        decode_body(body)


def test_declaring_a_type_twice_raises():
    with pytest.raises(ValueError, match="declared twice"):
        @wire.message("test.wire.kitchen")
        class Again:
            x: int


def test_unsupported_field_types_fail_at_declaration():
    with pytest.raises(TypeError):
        @wire.message("test.wire.bad_set")
        class BadSet:
            xs: set[int]
    with pytest.raises(TypeError):
        @wire.record
        class BadUnion:
            x: int | str
    with pytest.raises(TypeError):
        @wire.record
        class BadTuple:
            x: tuple[int, str]
    with pytest.raises(TypeError):
        @wire.record
        class BadKeys:
            x: dict[int, str]
    assert "test.wire.bad_set" not in REGISTRY


def test_the_body_on_the_wire_is_each_field_by_name_in_plain_data():
    spans = [{"start": 0, "stop": 2}, {"start": 2, "stop": 2}]
    tree = {"label": "root", "children": [{"label": "a", "children": []},
                                          {"label": "b", "children": [{"label": "c", "children": []}]}]}
    assert wire_body(kitchen()) == {
        "i": 3, "f": 0.5, "b": True, "s": "é", "raw": b"\x00\xff", "spans": spans,
        "weights": {"a": 1.0, "b": -2.5}, "dims": (2, 576), "maybe": None,
        "nested": {"start": 1, "stop": 4}, "extra": {"k": [1, "two", None]}, "tree": tree}
    # what msgpack makes of it, tuples as arrays, decodes to the same message
    assert decode_body(wire_body(kitchen())) == kitchen()


def test_a_decoded_record_is_frozen_like_a_constructed_one():
    back = decode_body(wire_body(kitchen()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.i = 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.nested.start = 0
    assert vars(back) == vars(kitchen())


def test_a_record_with_post_init_is_built_through_it():
    seen = []

    @wire.message("test.wire.post_init")
    class Counted:
        n: int = 1

        def __post_init__(self):
            seen.append(self.n)

    try:
        back = wire.decode(wire.encode(wire.Message(Counted(5)))).body
        assert back == Counted(5) and seen == [5, 5, 5]
    finally:
        REGISTRY.pop("test.wire.post_init")


def test_nesting_is_what_the_schema_allows():
    from wire.messages.shard import Forward
    from wire.schema import nesting

    from .declared import Batch, Item
    assert nesting(int) == 0 and nesting(list[int]) == 1 and nesting(dict[str, list[int]]) == 2
    assert nesting(Span) == 1 and nesting(Item) == 3        # a Tensor is a map holding lists
    assert nesting(Batch) == 5                              # items: list > Item > Tensor > shape
    assert nesting(Node) == math.inf and nesting(Kitchen) == math.inf   # a tree, and Any
    assert nesting(Forward) <= wire.limits.MAX_DEPTH       # its bodies are not walked


def test_evolve_is_replace_for_records():
    k = kitchen()
    e = wire.evolve(k, i=9, nested=None)
    assert e == dataclasses.replace(k, i=9, nested=None) and k == kitchen()
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.i = 1
    with pytest.raises(TypeError, match="no field 'nope'"):
        wire.evolve(k, nope=1)
