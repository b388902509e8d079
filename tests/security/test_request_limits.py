"""Findings: bodies under --max-body that do not fit the bus (a 3.9 MB prompt, a 1 MB stop
string) got 500, not 413; a tool schema nested 6 objects deep got 500; a 5 KB deeply nested
body logged a 180 KB traceback."""

from __future__ import annotations

import json

from .test_cross_site_stack import model_id, post


def chat(stack, **fields) -> tuple[int, dict]:
    body = {"model": model_id(stack), "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "hi"}], **fields}
    return post(stack.http + "/v1/chat/completions", json.dumps(body).encode(),
                {"Content-Type": "application/json"})


def nested_schema(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for i in range(depth):
        schema = {"type": "object", "properties": {f"p{i}": schema}}
    return schema


def tool(depth: int) -> list[dict]:
    return [{"type": "function", "function": {"name": "f", "description": "a tool",
                                              "parameters": nested_schema(depth)}}]


def test_a_3_9_mb_prompt_is_413(gw_stack):
    status, answer = chat(gw_stack, messages=[{"role": "user", "content": "a " * 1_950_000}])
    assert status == 413, answer
    assert "too large" in answer["error"]["message"]


def test_a_1_mb_stop_string_is_413(gw_stack):
    status, answer = chat(gw_stack, stop=["x" * (1 << 20)])
    assert status == 413, answer


def test_a_tool_schema_6_objects_deep_is_served(gw_stack):
    status, answer = chat(gw_stack, tools=tool(6))
    assert status == 200, answer


def test_nesting_past_the_limit_is_400_naming_the_field(gw_stack):
    status, answer = chat(gw_stack, tools=tool(40))
    assert status == 400, answer
    assert answer["error"]["param"] == "tools" and "tools[0].function" in answer["error"]["message"]
    # A 5 KB body nested 2,500 deep: a 400, nothing raised inside.
    status, answer = post(gw_stack.http + "/v1/chat/completions",
                          b'{"model": "m", "x": ' + b"[" * 2500 + b"]" * 2500 + b"}",
                          {"Content-Type": "application/json"})
    assert status == 400, answer
