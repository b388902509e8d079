"""A request's tools, read from each protocol's fields into one form (OpenAI's function
definitions, which is what `tokenizer.render` takes), and how a forced call is asked for.

Forcing works by starting the assistant's answer with the opening of a call (the Render
`assistant_prefix`): `tool_choice` "required"/"any" opens `<tool_call>{"name": "` and lets the
model pick the name; a named tool opens the call with its name written in. The parser is fed
the same prefix first, so what the model writes is read as the rest of that call. The rest is
constrained too (`Tools.grammar`, the request's format): one of the listed names, arguments
valid against that tool's parameters, the call closed, and then the end of the answer.

When the model decides (`auto`, or no tool_choice), it may answer in text, and each call it opens
is constrained from its `<tool_call>` on (`Tools.call_grammar`, a format with that `trigger`): one
call of a listed tool, arguments valid against its parameters, then closed; text may follow.
Every call is held to its schema, whether the tool says `strict` or not: a call that does not
parse is lost to the client, and checking it costs nothing until the call opens. A request that
also asks for a `response_format` keeps that format instead (its answer is the JSON asked for).
"""

from __future__ import annotations

import json
import uuid
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wire.messages.scheduler import Generate

from .errors import BadRequest
from .fields import Fields, text_of
from .toolcalls import CLOSE, OPEN, ToolCallStream


@dataclass(frozen=True)
class Tools:
    functions: list[dict[str, Any]]      # [{type: function, function: {name, description, parameters}}]
    force: str | None = None             # None: the model decides; "": some tool; else that tool
    # Text the assistant's answer already starts with, when the model decides: Ollama continues
    # a chat whose last message is the assistant's (a call opened there is parsed as one).
    prefill: str = ""

    @property
    def names(self) -> list[str]:
        return [f["function"]["name"] for f in self.functions]

    @property
    def prefix(self) -> str:
        if self.force is None:
            return self.prefill
        if self.force == "":
            return OPEN + _CALL_START
        return OPEN + '\n{"name": ' + json.dumps(self.force) + ', "arguments": '

    @property
    def grammar(self) -> str | None:
        """What may follow `prefix` in a forced call, in llguidance's Lark dialect: one call of
        a listed tool (the named one) with arguments valid against its parameters."""
        if self.force is None:
            return None
        if self.force:
            schema = _args_schema(self._function(self.force).get("parameters"))
            return f"start: args {_literal(_CALL_END)}\nargs: %json {schema}\n"
        return _calls("", self.functions)

    @property
    def call_grammar(self) -> str:
        """What may follow `<tool_call>` in a call the model opens itself: the call's opening
        as the tool prompt shows it, then one call of a listed tool, closed."""
        return _calls(_CALL_START, self.functions)

    def offered(self, request: Generate) -> Generate:
        """`request` (a chat) with these tools, and a forced call's opening (or the prefill) as
        the start of the answer: the scheduler has the tokenizer render them into the prompt.
        A forced call's rest is constrained by its grammar; when the model decides, each call
        it opens is (a format with the `<tool_call>` trigger), unless the request asks for a
        format of its own or continues a call the prefill opened."""
        fmt = request.format
        if self.force is not None:
            fmt = {"type": "lark", "grammar": self.grammar}
        elif fmt is None and self.functions and _outside_calls(self.prefill):
            fmt = {"type": "lark", "grammar": self.call_grammar, "trigger": OPEN}
        return dataclasses.replace(request, tools=self.functions or None,
                                   assistant_prefix=self.prefix, format=fmt)

    def _function(self, name: str) -> dict:
        return next(f["function"] for f in self.functions if f["function"]["name"] == name)

    def stream(self) -> ToolCallStream:
        """A parser for this request's output, already past the forced prefix."""
        s = ToolCallStream(self.names)
        s.feed(self.prefix)     # held back inside the open call: yields nothing
        return s


# Arguments written as json.dumps writes them (the form the tool prompt shows), no other
# whitespace: room for blank lines is room for a small model to loop in.
_COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


# A call as the tool prompt writes it: `<tool_call>` CALL_START name and arguments CALL_END.
_CALL_START = '\n{"name": "'
_CALL_END = "}\n" + CLOSE


def _calls(head: str, functions: list[dict]) -> str:
    """Lark: `head`, then the rest of one call of a listed tool, from its name (as the end of a
    JSON string) to the closing tag."""
    lines = [f"start: {_literal(head)} calls" if head else "start: calls",
             "calls: " + " | ".join(f"call_{i}" for i in range(len(functions)))]
    for i, f in enumerate(functions):
        name = _literal(json.dumps(f["function"]["name"])[1:] + ', "arguments": ')
        lines += [f"call_{i}: {name} args_{i} {_literal(_CALL_END)}",
                  f"args_{i}: %json {_args_schema(f['function'].get('parameters'))}"]
    return "\n".join(lines) + "\n"


def _outside_calls(text: str) -> bool:
    """Whether `text` ends outside any tool call: no call left open, no opening begun."""
    return text.rfind(OPEN) <= text.rfind(CLOSE) and not any(
        OPEN.startswith(text[-k:]) for k in range(1, min(len(OPEN), len(text) + 1)))


def _args_schema(parameters: dict | None) -> str:
    """A tool's parameters as the one-line schema of a Lark %json rule."""
    schema = dict(parameters or {"type": "object"})
    schema["x-guidance"] = {**_COMPACT, **(schema.get("x-guidance") or {})}
    return json.dumps(schema, separators=(",", ":"))


def _literal(text: str) -> str:
    """`text` as a Lark string literal (JSON's escapes, ASCII only)."""
    return json.dumps(text, ensure_ascii=True)


def call_id(prefix: str = "call_") -> str:
    return prefix + uuid.uuid4().hex[:24]


def function(f: Fields, param: str) -> dict[str, Any]:
    """One OpenAI/Ollama-style function definition ({function: {name, ...}}), checked."""
    return _definition(f.obj("function"), f"{param}.function", "parameters", None)


def _flat_function(tool: Any, i: int, schema_key: str) -> dict[str, Any]:
    """A tool declared flat ({name, description, SCHEMA_KEY}: Anthropic's input_schema, the
    Responses API's parameters) as an OpenAI-style function definition, checked."""
    return _definition(Fields(tool, prefix=f"tools[{i}]."), f"tools[{i}]", schema_key,
                       {"type": "object"})


def _definition(fn: Fields, where: str, schema_key: str, default: dict | None) -> dict[str, Any]:
    name = fn.str("name", required=True)
    if not name:
        raise BadRequest(f"{where}.name must not be empty", param=f"{where}.name")
    out: dict[str, Any] = {"name": name}
    if fn.has("description"):
        out["description"] = fn.str("description")
    schema = fn.body.get(schema_key)
    if schema is not None and not isinstance(schema, dict):
        raise BadRequest(f"{where}.{schema_key} must be a JSON schema object",
                         param=f"{where}.{schema_key}")
    schema = default if schema is None else schema
    if schema is not None:
        out["parameters"] = schema
    strict = fn.body.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise BadRequest(f"{where}.strict must be a boolean", param=f"{where}.strict")
    # `strict` asks that a call's arguments follow the schema: every call is held to it here,
    # strict or not (module docstring), so it changes nothing and is not passed on.
    return {"type": "function", "function": out}


def openai_tools(f: Fields, choice_key: str = "tool_choice") -> Tools | None:
    """`tools` (+ `tool_choice`: none, auto, required, or {type: function, function: {name}})."""
    items = f.list("tools")
    if not items:
        return None
    fns = [function(Fields(t, prefix=f"tools[{i}]."), f"tools[{i}]") for i, t in enumerate(items)]
    return _chosen(fns, f.body.get(choice_key), choice_key,
                   lambda c: c.obj("function").str("name", required=True))


def responses_tools(f: Fields) -> Tools | None:
    """The Responses API's `tools` (flat: {type: function, name, description, parameters,
    strict}) and `tool_choice` (none, auto, required, or {type: function, name}). Other tool
    types (web search, files, MCP...) are a 400 naming them: this server runs none."""
    items = f.list("tools")
    choice = f.body.get("tool_choice")
    if not items:
        if choice not in (None, "none", "auto"):
            raise BadRequest("tool_choice asks for a call, but no tools are given",
                             param="tool_choice")
        return None
    fns = []
    for i, t in enumerate(items):
        kind = Fields(t, prefix=f"tools[{i}].").str("type", required=True)
        if kind != "function":
            raise BadRequest(f"tools[{i}].type is {kind!r}; only function tools are supported",
                             param=f"tools[{i}].type")
        fns.append(_flat_function(t, i, "parameters"))

    def name(c: Fields) -> str:
        if c.str("type", required=True) != "function":
            raise BadRequest("tool_choice.type must be function (only function tools are "
                             "supported)", param="tool_choice.type")
        return c.str("name", required=True)
    return _chosen(fns, choice, "tool_choice", name)


def anthropic_tools(f: Fields) -> Tools | None:
    """`tools` [{name, description, input_schema}] and `tool_choice` {type: auto|any|tool|none}."""
    items = f.list("tools")
    if not items:
        return None
    fns = [_flat_function(t, i, "input_schema") for i, t in enumerate(items)]
    choice = f.obj("tool_choice")
    kind = choice.str("type", "auto")
    if kind == "auto":
        return Tools(fns)
    if kind == "none":
        return None
    if kind == "any":
        return Tools(fns, force="")
    if kind == "tool":
        return _named(fns, choice.str("name", required=True), "tool_choice")
    raise BadRequest(f"tool_choice.type is {kind!r}; expected auto, any, tool or none",
                     param="tool_choice.type")


def _chosen(fns: list[dict], choice: Any, param: str,
            name_of: Callable[[Fields], str]) -> Tools | None:
    """OpenAI's tool_choice (none, auto, required, or an object naming a function, read by
    `name_of`) over the declared functions."""
    if choice is None or choice == "auto":
        return Tools(fns)
    if choice == "none":
        return None
    if choice == "required":
        return Tools(fns, force="")
    if isinstance(choice, dict):
        return _named(fns, name_of(Fields(choice, prefix=f"{param}.")), param)
    raise BadRequest(f"{param} must be none, auto, required or a function", param=param)


def _named(fns: list[dict], name: str, param: str) -> Tools:
    if name not in [f["function"]["name"] for f in fns]:
        raise BadRequest(f"{param} names {name!r}, which is not among the tools", param=param)
    return Tools(fns, force=name)


def call_arguments(raw: Any, param: str) -> dict:
    """A past call's arguments: an object, or (OpenAI) a JSON string of one."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise BadRequest(f"{param} is not valid JSON", param=param) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadRequest(f"{param} must be a JSON object", param=param)
    return raw


def past_calls(calls: Any, param: str) -> list[dict]:
    """An assistant turn's `tool_calls` (OpenAI or Ollama form) in the form templates read."""
    if not isinstance(calls, list):
        raise BadRequest(f"{param} must be a list", param=param)
    out = []
    for j, c in enumerate(calls):
        fn = Fields(c, prefix=f"{param}[{j}].").obj("function")
        out.append({"id": c.get("id") or call_id(), "type": "function", "function": {
            "name": fn.str("name", required=True),
            "arguments": call_arguments(fn.body.get("arguments"),
                                        f"{param}[{j}].function.arguments")}})
    return out


def anthropic_turn(role: str, content: Any, i: int) -> list[dict]:
    """One Anthropic message as chat turns: text, `tool_use` blocks as the assistant's
    tool_calls, `tool_result` blocks as `tool` turns (before the user's text)."""
    param = f"messages[{i}].content"
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise BadRequest(f"{param} must be a string or a list of blocks", param=param)
    texts, calls, results = [], [], []
    for j, b in enumerate(content):
        bf = Fields(b, prefix=f"{param}[{j}].")
        kind = bf.str("type", required=True)
        if kind == "text":
            texts.append(bf.str("text", required=True))
        elif kind == "tool_use" and role == "assistant":
            calls.append({"id": bf.str("id") or call_id("toolu_"), "type": "function",
                          "function": {"name": bf.str("name", required=True),
                                       "arguments": call_arguments(b.get("input"),
                                                                   f"{param}[{j}].input")}})
        elif kind == "tool_result" and role == "user":
            inner = b.get("content")
            results.append({"role": "tool", "tool_call_id": bf.str("tool_use_id", ""),
                            "content": "" if inner is None else text_of(inner,
                                                                        f"{param}[{j}].content")})
        else:
            raise BadRequest(f"{param}[{j}] is a {kind!r} block, which a {role} turn cannot hold "
                             f"here (text, tool_use from the assistant, tool_result from the user)",
                             param=f"{param}[{j}]")
    turns = list(results)
    if texts or calls or not results:
        turn: dict[str, Any] = {"role": role, "content": "".join(texts)}
        if calls:
            turn["tool_calls"] = calls
        turns.append(turn)
    return turns
