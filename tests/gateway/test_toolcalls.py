"""The tool-call parser (gateway/toolcalls.py): calls found, junk kept as text, chunking-blind."""

import json

from hypothesis import given, settings, strategies as st

from gateway.toolcalls import CLOSE, OPEN, Text, ToolCall, ToolCallStream, parse


def block(obj) -> str:
    return f"{OPEN}\n{json.dumps(obj)}\n{CLOSE}"


def test_a_call_is_taken_out_of_the_text():
    text, calls = parse("Let me check.\n" + block({"name": "f", "arguments": {"x": 1}}))
    assert text == "Let me check.\n"
    assert calls == [ToolCall(0, "f", {"x": 1})]


def test_several_calls_are_numbered_in_order():
    _, calls = parse(block({"name": "a", "arguments": {}}) + block({"name": "b", "arguments": {"y": [1]}}))
    assert [(c.index, c.name, c.arguments) for c in calls] == [(0, "a", {}), (1, "b", {"y": [1]})]


def test_arguments_as_a_json_string_and_parameters_are_accepted():
    _, calls = parse(block({"name": "f", "arguments": json.dumps({"k": "v"})})
                     + block({"name": "g", "parameters": {"z": 2}}))
    assert [c.arguments for c in calls] == [{"k": "v"}, {"z": 2}]


def test_an_unclosed_block_with_whole_json_is_a_call():
    _, calls = parse(OPEN + '{"name": "f", "arguments": {"a": true}}')
    assert calls == [ToolCall(0, "f", {"a": True})]


def test_broken_calls_come_back_as_the_text_they_were():
    for junk in [OPEN + '{"name": "f", "arguments": {', OPEN + "[1,2]" + CLOSE,
                 OPEN + '{"arguments": {}}' + CLOSE, OPEN + '{"name": "f", "arguments": 3}' + CLOSE,
                 OPEN + '{"name": "", "arguments": {}}' + CLOSE, "<tool_ca", OPEN]:
        assert parse(junk) == (junk, [])


def test_a_closing_tag_inside_an_argument_string_is_part_of_the_argument():
    args = {"city": "Paris</tool_call>", "note": 'a \\" then </tool_call> "'}
    text = "Sure. " + block({"name": "f", "arguments": args}) + " Done."
    assert parse(text) == ("Sure.  Done.", [ToolCall(0, "f", args)])
    assert _run(_chunks(text, [9, 30, 31, 47, 60])) == parse(text)


def test_an_undeclared_name_is_text():
    raw = block({"name": "rm_rf", "arguments": {}})
    assert parse(raw, names={"f"}) == (raw, [])
    assert parse(raw, names={"rm_rf"})[1][0].name == "rm_rf"


def test_text_that_may_open_a_call_is_held_back_until_known():
    s = ToolCallStream()
    assert s.feed("hello <tool") == [Text("hello ")]
    assert s.feed("box>") == [Text("<toolbox>")]
    assert s.finish() == []


def _chunks(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    edges = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(edges, edges[1:])]


def _run(chunks, names=None):
    s = ToolCallStream(names)
    pieces = [p for c in chunks for p in s.feed(c)] + s.finish()
    return ("".join(p.text for p in pieces if isinstance(p, Text)),
            [p for p in pieces if isinstance(p, ToolCall)])


_fragments = st.sampled_from([OPEN, CLOSE, "<", "<tool", "</tool_call", '{"name": "f", "arguments": {}}',
                              '{"name": "g"', "}", "{", '"', "\n", "text ", "é"])
_junk = st.lists(st.one_of(_fragments, st.text(max_size=8)), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(_junk, st.lists(st.integers(min_value=0), max_size=6))
def test_any_chunking_gives_the_same_answer_and_nothing_raises(text, cuts):
    assert _run(_chunks(text, cuts)) == parse(text)


@settings(max_examples=300, deadline=None)
@given(_junk)
def test_without_calls_found_the_text_is_kept_whole(text):
    out, calls = parse(text, names=set())      # no name is declared: nothing may be a call
    assert calls == [] and out == text


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20).filter(lambda t: OPEN not in t and not t.endswith("<")),
       st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3))
def test_calls_survive_any_surrounding_text(prefix, args):
    text = prefix + block({"name": "f", "arguments": args})
    out, calls = parse(text)
    assert calls == [ToolCall(0, "f", args)]
    assert out == prefix
