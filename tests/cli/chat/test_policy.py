"""The pure parts of `llmbus chat`: what is sent each turn, the commands, which stack, errors."""

import pytest

from bus.errors import RemoteError
from services.cli.chat.client import refusal
from services.cli.chat.conversation import Conversation, parse_line
from services.cli.chat.errors import NoStack
from services.cli.chat.options import ChatOptions
from services.cli.chat.target import NO_STACK, pick

STACKS = [  # as services/cli/stacks.running() lists them: newest first
    {"cluster": "local-new", "pid": 2, "scheduler": "127.0.0.1:2000", "model": "/m/a.gguf",
     "shards": 2},
    {"cluster": "local-old", "pid": 1, "scheduler": "127.0.0.1:1000", "model": "/m/a.gguf",
     "shards": 3},
]


def test_each_turn_sends_the_whole_conversation_and_reset_forgets_it():
    conv = Conversation(ChatOptions())
    assert conv.messages("hi") == [{"role": "user", "content": "hi"}]
    conv.answered("My name is Ada.", "Hello Ada!")
    assert conv.messages("What is my name?") == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada!"},
        {"role": "user", "content": "What is my name?"}]
    conv.reset()
    assert conv.messages("again") == [{"role": "user", "content": "again"}]


def test_a_system_message_goes_first_only_when_given():
    conv = Conversation(ChatOptions(system="Be brief."))
    conv.answered("q", "a")
    assert [m["role"] for m in conv.messages("q2")] == ["system", "user", "assistant", "user"]
    assert conv.messages("q2")[0]["content"] == "Be brief."
    assert Conversation(ChatOptions(system=None)).messages("q")[0]["role"] == "user"


def test_the_request_carries_the_options_and_a_fresh_id_to_cancel_it_by():
    o = ChatOptions(temperature=0.0, top_p=0.5, top_k=7, min_p=0.1, max_tokens=9, seed=3)
    conv = Conversation(o)
    a, b = conv.request("q"), conv.request("q")
    assert (a.temperature, a.top_p, a.top_k, a.min_p, a.max_tokens, a.seed) == \
        (0.0, 0.5, 7, 0.1, 9, 3)
    assert a.messages == [{"role": "user", "content": "q"}] and a.prompt is None
    assert a.request_id.startswith("chat-") and a.request_id != b.request_id


def test_defaults_are_the_ones_chat_users_expect():
    o = ChatOptions()
    assert (o.temperature, o.top_p, o.top_k, o.min_p) == (0.8, 0.95, 40, 0.05)  # llama.cpp's
    assert o.max_tokens == 1024 and o.seed is None and o.system is None   # bounded by default


@pytest.mark.parametrize("line, kind", [
    ("/reset", "reset"), ("/clear", "reset"), ("/exit", "exit"), ("/quit", "exit"),
    ("  /EXIT  ", "exit"), ("/help", "help"), ("/frobnicate", "unknown"), ("", "empty"),
    ("   ", "empty"), ("What is 2+2?", "ask"), ("a/b", "ask")])
def test_lines_at_the_prompt(line, kind):
    assert parse_line(line).kind == kind


def test_a_question_is_sent_without_surrounding_blanks():
    assert parse_line("  hello there \n").text == "hello there"


def test_the_newest_stack_is_picked_unless_one_is_named():
    assert pick(STACKS).cluster == "local-new"
    assert pick(STACKS, cluster="local-old").scheduler == "127.0.0.1:1000"
    t = pick(STACKS, scheduler="10.0.0.5:4000")
    assert t.scheduler == "10.0.0.5:4000" and t.cluster is None


def test_no_stack_says_how_to_start_one():
    with pytest.raises(NoStack, match="start one with `llmbus up`") as e:
        pick([])
    assert str(e.value) == NO_STACK
    with pytest.raises(NoStack, match="'nope'"):
        pick(STACKS, cluster="nope")


def test_a_malformed_scheduler_address_names_the_expected_form():
    with pytest.raises(ValueError, match="--scheduler 'localhost': expected HOST:PORT"):
        pick(STACKS, scheduler="localhost")


def test_queue_full_says_when_to_come_back():
    r = refusal(RemoteError("queue_full", "256 requests are waiting", 2.5, "scheduler-0"))
    assert r.code == "queue_full" and r.retry_after == 2.5
    assert "busy" in str(r) and "try again in 2.5 s" in str(r)


def test_other_refusals_keep_the_schedulers_code_and_words():
    r = refusal(RemoteError("bad_sampling", "sampling parameter temperature=-1.0 is invalid"))
    assert str(r) == "bad_sampling: sampling parameter temperature=-1.0 is invalid"
