"""A phrase repeated within a line ends the answer (repeated_phrase_loop); other repetition does not."""

import pytest
from hypothesis import given, strategies as st

from services.scheduler.batching.errors import ConfigError
from services.scheduler.batching.loop_detect import PhraseLoopDetector
from services.scheduler.batching.policy import Scheduler
from services.scheduler.batching.stop_rules import StopState

from .harness import req, small

# The loop `llmbus chat "My name is Alice. Please remember it." --seed 1` fell into (issue 37),
# as token pieces: one line that never ends.
PHRASE = ["I", "'m", " happy", " to", " help", ".", "You", " can", " reach", " me", " at", " my",
          " website", "."]


def feed(pieces_and_ids, repeats=4, max_tokens=64, min_chars=8):
    """Feed (piece, id) pairs through a StopState; return (tokens fed, text emitted, finish)."""
    state = StopState(max_tokens=10_000, phrase=PhraseLoopDetector(repeats, max_tokens, min_chars))
    out = []
    for n, (piece, token_id) in enumerate(pieces_and_ids, 1):
        emit, finish = state.feed(piece, token_id)
        out.append(emit)
        if finish is not None:
            return n, "".join(out), finish
    return len(pieces_and_ids), "".join(out), None


def tokens(pieces):
    """Each distinct piece gets its own id, as a tokenizer would."""
    ids = {}
    return [(p, ids.setdefault(p, 100 + len(ids))) for p in pieces]


def test_a_phrase_repeated_in_one_line_stops_at_its_fourth_time():
    answer = tokens(["Hello", " Alice", "!", " "] + PHRASE * 10)
    n, text, finish = feed(answer)
    assert finish.reason == "repeated_phrase_loop"
    assert n == 4 + 4 * len(PHRASE)              # at the last token of the fourth repeat
    assert "\n" not in text and text.endswith("".join(PHRASE) * 4)
    # The phrase reported is the repeating block (whichever rotation the tail ends in).
    assert finish.detail == "".join(PHRASE)


def test_three_repeats_do_not_stop():
    n, _, finish = feed(tokens(PHRASE * 3 + [" And", " then", " something", " else", "."]))
    assert finish is None


def test_trivial_repeats_are_not_a_phrase():
    # "0,0,0,...", dashes, spaces: blocks with fewer than 8 visible characters.
    n, _, finish = feed(tokens(["0", ","] * 7 + ["-"] * 7 + [" "] * 60))
    assert finish is None


def test_a_phrase_longer_than_the_window_is_left_to_the_other_rules():
    long_phrase = [f" w{i}" for i in range(20)]
    n, _, finish = feed(tokens(long_phrase * 5), max_tokens=16)
    assert finish is None


@given(st.lists(st.integers(0, 3), min_size=1, max_size=60))
def test_fires_exactly_where_the_tail_is_a_block_repeated(ids):
    # The definition, searched directly: the first token after which the tail is some block of
    # p <= 6 tokens four times in a row, whose text has at least 8 visible characters.
    pieces = {0: "ab", 1: "cd", 2: " ", 3: "efgh"}
    def looping(seq):
        for p in range(1, 7):
            if len(seq) >= 4 * p and seq[-p:] * 4 == seq[-4 * p:] and \
                    sum(len(pieces[i].strip()) for i in seq[-p:]) >= 8:
                return True
        return False
    expected = next((n for n in range(1, len(ids) + 1) if looping(ids[:n])), None)
    n, _, finish = feed([(pieces[i], i) for i in ids], max_tokens=6)
    assert (n if finish is not None else None) == expected


def test_phrase_repeats_zero_turns_the_detection_off_and_one_is_refused():
    sched = Scheduler(small(phrase_repeats=0))
    sched.submit(req("a"))
    assert sched._seqs["a"].text.stop.phrase is None      # the loop above would run to its length
    assert Scheduler(small()).config.phrase_repeats == 4
    with pytest.raises(ConfigError, match="phrase_repeats"):
        small(phrase_repeats=1)


@pytest.mark.parametrize("cycle, reason", [((5, 6, 7), "repeated_phrase_loop"), ((120,), "repeated_line_loop")])
def test_an_answer_a_grammar_holds_is_not_cut_by_the_loop_stops(cycle, reason):
    """A cut JSON answer or tool call would not parse: the grammar (a string's maxLength) and
    max_tokens bound an answer it holds. The same loop unheld is cut."""
    from .harness import step

    def looping(chunk):
        return cycle[chunk.step % len(cycle)]

    ends = {}
    for held in (False, True):
        sched = Scheduler(small(context_length=128, num_pages=64))
        sched.submit(req("a", max_tokens=40, held=held))
        texts = []
        for _ in range(200):
            plan, outs = step(sched, looping)
            for o in outs:
                texts.append(o.text)
                if o.finish is not None:
                    ends[held] = (o.finish.reason, len(texts))
            if plan is None:
                break
    assert ends[False][0] == reason and ends[False][1] < 40
    assert ends[True] == ("length", 40)
