"""The Responses API's output items and their stream events, built from text and tool calls
(pure: gateway/response_items.py)."""

from __future__ import annotations

from gateway.response_items import ResponseItems, output_text
from gateway.toolcalls import Text, ToolCall

CALL = ToolCall(0, "get_weather", {"city": "Paris"})


def kinds(events: list[dict]) -> list[str]:
    return [e["type"].removeprefix("response.") for e in events]


def test_text_is_one_message_item_its_deltas_and_its_close():
    items = ResponseItems()
    events = items.feed([Text("Hel"), Text("lo")]) + items.finish()
    assert kinds(events) == ["output_item.added", "content_part.added", "output_text.delta",
                             "output_text.delta", "output_text.done", "content_part.done",
                             "output_item.done"]
    assert events[0]["item"]["content"] == [] and events[0]["item"]["status"] == "in_progress"
    assert events[4]["text"] == "Hello" and events[-1]["item"]["status"] == "completed"
    assert output_text(items.items) == "Hello"


def test_blank_text_around_a_call_makes_no_item_of_its_own():
    items = ResponseItems()
    events = items.feed([Text("\n"), CALL, Text("\n")]) + items.finish()
    assert kinds(events) == ["output_item.added", "function_call_arguments.delta",
                             "function_call_arguments.done", "output_item.done"]
    (call,) = items.items
    assert call["type"] == "function_call" and call["arguments"] == '{"city": "Paris"}'
    # Words before the call: a message first, closed before the call's item opens.
    items = ResponseItems()
    events = items.feed([Text(" \n"), Text("Let me look."), CALL]) + items.finish()
    assert [it["type"] for it in items.items] == ["message", "function_call"]
    assert output_text(items.items) == " \nLet me look."
    assert kinds(events).index("output_item.done") < kinds(events).index("function_call_arguments.delta")


def test_an_empty_or_blank_answer_is_one_message_holding_it():
    for text in ("", "  "):
        items = ResponseItems()
        items.feed([Text(text)])
        items.finish()
        assert [it["type"] for it in items.items] == ["message"]
        assert output_text(items.items) == text


def test_without_parallel_calls_a_second_call_stays_text():
    items = ResponseItems(parallel_tool_calls=False)
    items.feed([CALL, ToolCall(1, "get_weather", {"city": "Rome"})])
    items.finish()
    assert [it["type"] for it in items.items] == ["function_call", "message"]
    assert "Rome" in output_text(items.items) and items.calls == 1
