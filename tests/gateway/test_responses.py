"""OpenAI's Responses API (`/v1/responses`) through the official `openai` client, strict,
against the package's real stack: text and message input, instructions, the token limit,
the streamed events the SDK's stream reader accumulates, function tools (a call, then its
output sent back), `text.format`, and the fields this server refuses by name."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of Japan?"
ANSWER = "The capital of Japan is Tokyo."
SYSTEM = "You are a helpful assistant."
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
          "parameters": PARAMS, "strict": True}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
TEXT_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
               "response.content_part.added", "response.output_text.delta",
               "response.output_text.done", "response.content_part.done",
               "response.output_item.done", "response.completed"]


class City(BaseModel):
    name: str


def test_text_input_answers_as_the_chat_does(oai, model):
    r = oai.responses.create(model=model, input=QUESTION, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert r.output_text == ANSWER
    (item,) = r.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert item.content[0].type == "output_text"
    u = r.usage
    assert u.input_tokens > 0 and u.output_tokens > 0
    assert u.total_tokens == u.input_tokens + u.output_tokens


def test_message_input_and_instructions_are_the_chat_with_its_system_prompt(oai, model):
    r = oai.responses.create(model=model, instructions=SYSTEM, temperature=0, max_output_tokens=12,
                             input=[{"role": "user",
                                     "content": [{"type": "input_text", "text": QUESTION}]}])
    c = oai.chat.completions.create(model=model, temperature=0, max_tokens=12, messages=[
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])
    assert r.output_text == c.choices[0].message.content
    assert r.usage.input_tokens == c.usage.prompt_tokens
    assert r.instructions == SYSTEM


def test_max_output_tokens_ends_the_response_incomplete(oai, model):
    r = oai.responses.create(model=model, input=QUESTION, max_output_tokens=3, top_p=0.9)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.max_output_tokens == 3 and r.top_p == 0.9


def test_the_stream_is_the_event_sequence_the_sdk_reads(oai, model):
    with oai.responses.stream(model=model, input=QUESTION, temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas >= 2
    assert kinds == TEXT_EVENTS[:4] + ["response.output_text.delta"] * deltas + TEXT_EVENTS[5:]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == ANSWER
    assert final.output_text == ANSWER and final.status == "completed"
    assert len({events[0].response.id, final.id}) == 1 and final.usage.output_tokens > 0


def test_a_named_tool_call_and_its_output_continue_the_conversation(oai, model):
    r = oai.responses.create(model=model, input=ASK, tools=TOOLS, temperature=0,
                             tool_choice={"type": "function", "name": "get_weather"},
                             max_output_tokens=40)
    (call,) = r.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.call_id.startswith("call_") and "city" in json.loads(call.arguments)
    again = oai.responses.create(
        model=model, tools=TOOLS, temperature=0, max_output_tokens=12,
        input=ASK + [o.model_dump(exclude_none=True) for o in r.output] + [
            {"type": "function_call_output", "call_id": call.call_id,
             "output": "18 C and sunny"}])
    assert again.status in ("completed", "incomplete")
    # The call and its output reach the prompt: more input than the question alone.
    assert again.usage.input_tokens > r.usage.input_tokens


def test_a_required_tool_call_streams_as_a_function_call_item(oai, model):
    with oai.responses.stream(model=model, input=ASK, tools=TOOLS, tool_choice="required",
                              temperature=0, max_output_tokens=40) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta",
                     "response.function_call_arguments.done", "response.output_item.done",
                     "response.completed"]
    (call,) = final.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert isinstance(json.loads(call.arguments), dict)


def test_text_format_json_schema_parses(oai, model):
    # France, not Japan: the small model's greedy string for Japan (since the float16 KV cache) loops
    # on, and City's name has no maxLength: it ends at max_output_tokens, unclosed (the README's
    # "schemas bound nothing the model writes").
    r = oai.responses.parse(model=model, input="Name the capital of France as JSON.",
                            text_format=City, temperature=0, max_output_tokens=30)
    assert isinstance(r.output_parsed, City) and r.output_parsed.name


@pytest.mark.parametrize("extra, param", [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"type": "input_image", "image_url": "x"}]}, "input[0].type"),
    ({"temperature": 3}, "temperature"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "parameters": PARAMS}]}, "tools[0].name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
])
def test_what_the_server_cannot_honour_is_refused_by_name(oai, model, extra, param):
    body = {"model": model, "input": QUESTION, "max_output_tokens": 2, **extra}
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(**body)
    assert e.value.body["param"] == param
