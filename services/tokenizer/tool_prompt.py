"""Tools for a chat template that knows none: the built-in tool prompt.

A template that reads `tools` (Qwen, Hermes, Llama 3.1...) gets the definitions, the assistant
`tool_calls` and the `tool` turns as they are. Any other template (SmolLM2's among them) gets the
chat rewritten in the Hermes convention, the one most small instruct models were tuned on and the
one `gateway/toolcalls.py` parses back:

- a system text listing the tools as JSON inside `<tools></tools>`, asking for each call as
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, is added to (or becomes) the
  first system message;
- an assistant turn's `tool_calls` are appended to its text in that same form;
- a `tool` turn becomes a user turn holding `<tool_response>...</tool_response>`.
"""

from __future__ import annotations

import json
from typing import Any

import jinja2.meta

TOOL_PROMPT = (
    "You may call one or more functions to assist with the user query. The functions you can "
    "call are described in JSON inside <tools></tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with one object per call holding its name and its arguments, "
    "inside <tool_call></tool_call> tags, and nothing else. For example:\n{example}")
# What an example call's arguments hold, by JSON type, where the schema gives no enum or const.
_EXAMPLE_VALUES = {"string": "text", "integer": 1, "number": 1.5, "boolean": True, "null": None}


def template_reads_tools(env: jinja2.Environment, source: str) -> bool:
    """Whether a template's text uses the `tools` variable (so it renders them itself)."""
    try:
        return "tools" in jinja2.meta.find_undeclared_variables(env.parse(source))
    except jinja2.TemplateSyntaxError:
        return False     # compile_template reports the syntax error by name


def uses_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bool:
    """Whether a chat needs the tool rewriting at all."""
    return bool(tools) or any(isinstance(m, dict) and (m.get("role") == "tool" or m.get("tool_calls"))
                              for m in messages)


def builtin_tool_chat(messages: list[dict[str, Any]],
                      tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The chat rewritten for a template without tool support (see the module docstring)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if not isinstance(m, dict):
            out.append(m)         # normalize_messages refuses it by index
        elif m.get("role") == "tool":
            out.append({"role": "user",
                        "content": f"<tool_response>\n{_text(m.get('content'))}\n</tool_response>"})
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            calls = "\n".join(_call_text(c) for c in m["tool_calls"])
            text = _text(m.get("content"))
            out.append({"role": "assistant", "content": f"{text}\n{calls}" if text else calls})
        else:
            out.append({k: v for k, v in m.items() if k != "tool_calls"})
    if tools:
        prompt = TOOL_PROMPT.format(tools="\n".join(_dumps(t) for t in tools),
                                    example=example_call(tools[0]))
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": f"{_text(out[0].get('content'))}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def example_call(tool: Any) -> str:
    """A concrete call of `tool` in the form the model must answer with: its real name and
    arguments of the types its parameters declare (an example the model may copy whole, as small
    models do, is still a call that parses, never a placeholder such as `<function-name>`)."""
    fn = tool.get("function", tool) if isinstance(tool, dict) else {}
    params = fn.get("parameters") if isinstance(fn, dict) else None
    args = example_value(params) if isinstance(params, dict) else {}
    return _call_text({"function": {"name": fn.get("name", ""),
                                    "arguments": args if isinstance(args, dict) else {}}})


def example_value(schema: Any, depth: int = 0) -> Any:
    """A value that fits a (simple) JSON schema: its const, first enum or example, else one by
    type (an object's required properties, or all of them when none is required)."""
    if not isinstance(schema, dict) or depth > 4:
        return "text"
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    for key in ("enum", "examples"):
        if isinstance(schema.get(key), list) and schema[key]:
            return schema[key][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example_value(schema[key][0], depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        names = [n for n in schema.get("required", []) if n in props] or list(props)
        return {n: example_value(props[n], depth + 1) for n in names}
    if kind == "array":
        return [example_value(schema.get("items"), depth + 1)]
    if kind in ("integer", "number") and isinstance(schema.get("minimum"), (int, float)):
        return schema["minimum"]
    return _EXAMPLE_VALUES.get(kind, "text")


def _call_text(call: Any) -> str:
    fn = call.get("function", call) if isinstance(call, dict) else {}
    args = fn.get("arguments", {}) if isinstance(fn, dict) else {}
    if isinstance(args, str):     # OpenAI sends arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            pass
    name = fn.get("name", "") if isinstance(fn, dict) else ""
    return f"<tool_call>\n{_dumps({'name': name, 'arguments': args})}\n</tool_call>"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):     # text parts; other parts are refused later by name
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return _dumps(content)


def _dumps(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False)
