"""A continuation (a request carried to a new scheduler with the tokens it already generated)
goes on exactly where the lost scheduler left it: cut after any token, the text sent before the
cut and the continuation's text make the undisturbed text, no token comes twice, the sampler's
step is the position in the answer, and the finish is the same."""

import pytest

from services.scheduler.batching import BadMaxTokens, BadTokenIds, Request, Scheduler

from .harness import TOKEN_BYTES, run_to_end, small

# A vocabulary whose answer splits a UTF-8 character across tokens ("€" = e2 82 ac) and
# passes text that could start a stop string ("EN" of "END") before it turns out not to.
PIECES = {101: b"Hel", 102: b"lo \xe2", 103: b"\x82", 104: b"\xac EN", 105: b"D?",
          106: b" no", 107: b" EN", 108: b"D!", 109: b" after"}
VOCAB = tuple(PIECES.get(t, b) for t, b in enumerate(TOKEN_BYTES + tuple(b"" for _ in range(16))))
ANSWER = (101, 102, 103, 104, 105, 106, 107, 108, 109, 109, 109)
PROMPT = (1, 2, 3, 4, 5)


def scripted(chunk) -> int:
    """The sampler's stand-in: the token at this step (the draw depends on (seed, step) only)."""
    return ANSWER[chunk.step] if chunk.seed == 7 else 0


def run(request: Request):
    sched = Scheduler(small(token_bytes=VOCAB, context_length=64))
    terms = sched.submit(request)
    if terms.finished is not None:
        return terms, []
    outs = []
    while (plan := sched.schedule()) is not None:
        for c in plan.chunks:
            if c.sample:       # the step is the token's position in the whole answer
                assert c.step == len(request.generated) + sum(o.token_id is not None for o in outs)
        outs += sched.complete(plan.batch_id, {c.request_id: _sampled(c) for c in plan.chunks
                                               if c.sample})
        sched.check()
    assert not sched.has_work()
    return terms, outs


def _sampled(c):
    from services.scheduler.batching import SampledToken
    return SampledToken(scripted(c))


@pytest.mark.parametrize("stop", [("END!",), ("END?", "zz"), ()])
def test_a_continuation_cut_after_any_token_gives_the_undisturbed_text(stop):
    whole = Request("r", PROMPT, 9, stop=stop, seed=7)
    _, undisturbed = run(whole)
    text = "".join(o.text for o in undisturbed)
    ids = [o.token_id for o in undisturbed if o.token_id is not None]
    finish = undisturbed[-1].finish
    for cut in range(len(ids) + 1):
        before = "".join(o.text for o in undisturbed[:cut])     # one output per token
        terms, rest = run(Request("r", PROMPT, 9, stop=stop, seed=7, generated=tuple(ids[:cut])))
        if terms.finished is not None:         # every token was sent: it ended with the last
            assert cut == len(ids) and terms.finished == finish
            continue
        assert before + "".join(o.text for o in rest) == text, (stop, cut)
        assert [o.token_id for o in rest if o.token_id is not None] == ids[cut:], (stop, cut)
        assert rest[-1].finish == finish


def test_the_undisturbed_answer_is_what_the_test_means():
    # The stop strings of the cases above do split across tokens and a character does too.
    _, outs = run(Request("r", PROMPT, 9, stop=("END!",), seed=7))
    assert "".join(o.text for o in outs) == "Hello € END? no "
    assert outs[-1].finish.stop_string == "END!"
    _, outs = run(Request("r", PROMPT, 9, seed=7))
    assert "".join(o.text for o in outs) == "Hello € END? no END! after" and \
        outs[-1].finish.reason == "length"


def test_continued_tokens_count_against_max_tokens_and_must_be_in_the_vocabulary():
    sched = Scheduler(small(token_bytes=VOCAB, vocab_size=len(VOCAB)))
    with pytest.raises(BadMaxTokens):
        sched.submit(Request("a", PROMPT, 2, seed=7, generated=(101, 102, 103)))
    with pytest.raises(BadTokenIds):
        sched.submit(Request("b", PROMPT, 9, seed=7, generated=(101, len(VOCAB))))
    terms = sched.submit(Request("c", PROMPT, 2, seed=7, generated=(101, 102)))
    assert terms.finished.reason == "length" and not sched.has_work()


def test_a_continuation_whose_last_token_was_eos_ends_at_once():
    terms, outs = run(Request("r", PROMPT, 9, seed=7, generated=(101, 0)))
    assert terms.finished.reason == "stop" and outs == []
