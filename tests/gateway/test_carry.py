"""The gateway's carrying of a request across the loss of its scheduler, as pure state: which
failures it waits out, what it passes on, and the continuation it submits."""

from gateway.carry import Carry
from wire.failures import (BAD_MAX_TOKENS, DUPLICATE_REQUEST, PEER_DEAD, PEER_RESTARTED,
                           QUEUE_FULL, SCHEDULER_STOPPED, STARTING)
from wire.messages.scheduler import Done, Generate, Started, Tokens


def request(**kw) -> Generate:
    return Generate(messages=[{"role": "user", "content": "hi"}], max_tokens=20, stop=["END"],
                    temperature=0.8, request_id="gw-1", **kw)


def tokens(*ids: int) -> Tokens:
    return Tokens(request_id="gw-1", text="x" * len(ids), token_ids=list(ids),
                  logprobs=[0.0] * len(ids))


def test_before_a_loss_the_request_goes_as_it_came():
    r = request(seed=None)
    assert Carry(r, 0.0).next_request(5.0) is r


def test_a_continuation_carries_the_tokens_sent_the_seed_and_the_deadline_left():
    c = Carry(request(deadline_s=30.0), arrived=100.0)
    assert c.take(Started(request_id="gw-1", prompt_tokens=9, max_tokens=20, seed=42))
    c.take(tokens(5, 6))
    c.take(tokens())
    c.take(tokens(7))
    c.lost()
    nxt = c.next_request(110.0)
    assert nxt.continued == [5, 6, 7] and nxt.seed == 42 and nxt.deadline_s == 20.0
    # Everything else is the request's own: the chat, the budget, the sampling, the stop strings.
    assert (nxt.messages, nxt.max_tokens, nxt.stop, nxt.temperature, nxt.request_id) == \
        (request().messages, 20, ["END"], 0.8, "gw-1")


def test_a_continuation_of_a_continuation_sends_each_token_once():
    c = Carry(request(), 0.0)
    c.take(Started(request_id="gw-1", prompt_tokens=9, max_tokens=20, seed=1))
    c.take(tokens(5))
    c.lost()
    # The new scheduler's Started is no news to the client; its tokens are the rest.
    assert c.take(Started(request_id="gw-1", prompt_tokens=9, max_tokens=20, seed=1)) is None
    c.take(tokens(6))
    c.lost()
    assert c.next_request(1.0).continued == [5, 6]


def test_a_deadline_that_passed_while_carried_is_left_to_the_scheduler_to_end():
    c = Carry(request(deadline_s=1.0), 0.0)
    c.lost()
    assert 0 < c.next_request(50.0).deadline_s < 0.01


def test_losses_are_bridged_and_refusals_only_once_carrying():
    c = Carry(request(), 0.0)
    assert all(c.bridges(code) for code in (PEER_DEAD, PEER_RESTARTED, SCHEDULER_STOPPED))
    # A first submission refused is the client's answer (a 429 with Retry-After, say).
    assert not c.bridges(QUEUE_FULL) and not c.bridges(STARTING)
    c.lost()
    assert c.bridges(QUEUE_FULL) and c.bridges(STARTING) and c.bridges(DUPLICATE_REQUEST)
    assert not c.bridges(BAD_MAX_TOKENS)


def test_a_scheduler_stopping_under_a_request_is_a_loss_not_its_end():
    c = Carry(request(), 0.0)
    stopped = Done(request_id="gw-1", finish_reason="failed", prompt_tokens=9,
                   completion_tokens=3, code=SCHEDULER_STOPPED)
    assert c.ended_by_loss(stopped)
    assert not c.ended_by_loss(Done(request_id="gw-1", finish_reason="length", prompt_tokens=9,
                                    completion_tokens=20))
