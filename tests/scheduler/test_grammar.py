"""The scheduler's grammars over a small vocabulary (every byte, a few longer tokens, an end
token): the mask after each token allows exactly what the format lets follow, the matcher
follows the generated tokens whatever was dropped in between, and a format we cannot follow is
refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gateway.toolcalls import parse
from gateway.tools import Tools
from services.scheduler.grammar.errors import BadFormat, GrammarError
from services.scheduler.grammar.matcher import Grammars
from wire.messages.scheduler import Generate

END = 256
LONG = [b'{"', b'": ', b", ", b"true", b"Paris"]
VOCAB = [bytes([b]) for b in range(256)] + [b""] + LONG      # id 256: the end token (control)


@pytest.fixture(scope="module")
def grammars():
    return Grammars(VOCAB, special_ids=[END], eot_ids=[END])


def ids(text: str) -> list[int]:
    return list(text.encode())          # one byte a token: a split the model may well draw


def allowed(words: np.ndarray) -> set[int]:
    return {t for t in range(len(VOCAB)) if (int(words[t >> 5]) >> (t & 31)) & 1}


def test_a_schema_allows_its_answer_and_then_only_the_end(grammars):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    c = grammars.compile({"type": "json_schema", "schema": schema})
    words = c.mask([])
    assert words.dtype == np.uint32 and words.shape == ((len(VOCAB) + 31) // 32,)
    # The text forced here, '{"ok": ', is drawn in llguidance's tokens (the longest that fit).
    assert allowed(words) == {VOCAB.index(b'{"')}
    answer = [VOCAB.index(b'{"')] + ids("ok") + [VOCAB.index(b'": ')]
    assert allowed(c.mask(answer)) == {ord("t"), ord("f"), VOCAB.index(b"true")}
    assert allowed(c.mask(answer + ids("true}"))) == {END}    # complete: only the end


def test_compact_json_as_json_dumps_writes_it(grammars):
    c = grammars.compile({"type": "json_object"})
    assert ord(" ") not in allowed(c.mask(ids("{")))         # no padding before a key
    assert allowed(c.mask(ids('{"a":'))) == {ord(" ")}        # ": " after a key


def test_the_matcher_follows_dropped_and_new_tokens(grammars):
    c = grammars.compile({"type": "json_schema", "schema": {"enum": ["Paris", "Rome"]}})
    first = allowed(c.mask(ids('"P')))
    c.mask(ids('"Paris"'))                  # ahead: then a step was dropped and is drawn again
    assert allowed(c.mask(ids('"P'))) == first
    assert allowed(c.mask(ids('"Ro'))) == {ord("m")}          # rolled back past the change


def test_a_token_the_grammar_does_not_allow_fails_the_request(grammars):
    c = grammars.compile({"type": "json_object"})
    with pytest.raises(GrammarError):
        c.mask(ids("x"))


@pytest.mark.parametrize("fmt, why", [
    ({"type": "xml"}, "'xml' is not supported"),
    ("json", "must be an object"),
    ({"type": "json_schema"}, "needs its schema"),
    ({"type": "json_schema", "schema": {"type": "object", "properties": {
        "a": {"$ref": "https://example.com/a.json"}}}}, "example.com"),
    ({"type": "json_schema", "schema": {"type": "integer", "minimum": "x"}}, "minimum"),
    ({"type": "lark", "grammar": "start: nowhere"}, "nowhere"),
])
def test_a_format_we_cannot_follow_is_refused_by_name(grammars, fmt, why):
    with pytest.raises(BadFormat, match=why):
        grammars.compile(fmt)


TOOLS = [{"type": "function", "function": {"name": n, "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}},
    "required": ["city"], "additionalProperties": False}}} for n in ("get_weather", 'say"hi')]


def follows(grammars, tools: Tools, text: str) -> bool:
    c = grammars.compile(tools.offered(Generate(messages=[])).format)
    try:
        return END in allowed(c.mask(ids(text)))
    except GrammarError:
        return False


@pytest.mark.parametrize("force, text, ok", [
    ("", 'get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', True),
    ("", 'say\\"hi", "arguments": {"city": "Paris"}}\n</tool_call>', True),   # escaped name
    ("", 'Paris", "arguments": {"city": "Paris"}}\n</tool_call>', False),     # not a tool
    ("", 'get_weather", "arguments": {"town": "Paris"}}\n</tool_call>', False),
    ("get_weather", '{"city": "Paris"}}\n</tool_call>', True),
    ("get_weather", '{"city": "Rome"}}\n</tool_call>', False),
    ("get_weather", '{"city": "Paris"}', False),                              # unclosed
])
def test_a_forced_call_is_one_of_the_listed_tools_with_valid_arguments(grammars, force, text, ok):
    tools = Tools(TOOLS, force=force)
    assert follows(grammars, tools, text) is ok
    if ok:        # the prefix the prompt ends with, and this rest, parse as that call
        _, calls = parse(tools.prefix + text, tools.names)
        assert len(calls) == 1 and calls[0].arguments == {"city": "Paris"}
        assert json.loads(calls[0].arguments_json) == {"city": "Paris"}


def test_the_text_a_schema_forces_needs_no_draw(grammars):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    c = grammars.compile({"type": "json_schema", "schema": schema})
    forced = c.forced([])
    assert b"".join(VOCAB[t] for t in forced) == b'{"ok": '
    assert c.forced(forced) == []                       # true or false: the model's to draw
    assert allowed(c.mask(forced)) == {ord("t"), ord("f"), VOCAB.index(b"true")}


def test_auto_tools_constrain_only_the_calls_the_model_opens(grammars):
    tools = Tools(TOOLS)             # tool_choice auto: the model decides
    fmt = tools.offered(Generate(messages=[])).format
    assert fmt["trigger"] == "<tool_call>"
    c = grammars.compile(fmt)
    assert c.mask(ids("Sure, a <b>bold</b> word.")) is None      # free text: no mask at all
    before = "Let me look. "
    opened = c.mask(ids(before + "<tool_"))                     # a call may be opening: masked
    assert ord("c") in allowed(opened) and END in allowed(opened)   # it may yet be text, or end
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    head = before + '<tool_call>\n{"name": "'
    assert allowed(c.mask(ids(head))) == {ord("g"), ord("s")}   # one of the listed names
    assert END not in allowed(c.mask(ids(before + "<tool_call>")))  # an open call must close
    assert ord("R") not in allowed(c.mask(ids(before + call[:-len('Paris"}}\n</tool_call>')])))
    assert c.mask(ids(before + call + " Done.")) is None        # closed: free again
    twice = before + call + " And: " + call[:-3]
    assert allowed(c.mask(ids(twice))) == {ord("l")}            # the next call is held too
    forced = c.forced(ids(before + call + " And: <tool_call>"))
    assert b"".join(VOCAB[t] for t in forced) == b'\n{"name": "'     # no draw needed
    assert c.mask(ids(before + "<tool")) is not None            # a step dropped: followed again
    _, calls = parse(before + call + " And: " + call, tools.names)
    assert [x.arguments for x in calls] == [{"city": "Paris"}] * 2


def test_auto_tools_refuse_a_bad_call_and_keep_a_prefill_call_free(grammars):
    c = grammars.compile(Tools(TOOLS).offered(Generate(messages=[])).format)
    with pytest.raises(GrammarError):
        c.mask(ids('<tool_call>\n{"name": "Paris'))
    # Ollama continues an assistant message that opened a call: its rest is not held (the
    # grammar would start mid-call), and a request's own format wins over the tools'.
    assert Tools(TOOLS, prefill="<tool_call>\n").offered(Generate(messages=[])).format is None
    own = {"type": "json_object"}
    assert Tools(TOOLS).offered(Generate(messages=[], format=own)).format == own


def test_a_token_holding_the_trigger_and_what_no_call_starts_with_is_masked_while_free():
    vocab = VOCAB + [b"<tool_call>\n", b"<tool_call>x"]
    g = Grammars(vocab, special_ids=[END], eot_ids=[END])
    c = g.compile(Tools(TOOLS).offered(Generate(messages=[])).format)
    free = c.mask(ids("Hello"))
    good, bad = len(VOCAB), len(VOCAB) + 1
    assert free is not None and {good, ord("x"), END} <= {
        t for t in range(len(vocab)) if (int(free[t >> 5]) >> (t & 31)) & 1}
    assert not (int(free[bad >> 5]) >> (bad & 31)) & 1
    assert b"".join(vocab[t] for t in c.forced(ids("Hello") + [good])) == b'{"name": "'
