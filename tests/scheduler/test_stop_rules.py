"""Stop rules on text pieces: what the client sees and why a sequence ends."""

from hypothesis import example, given, strategies as st

from services.scheduler.batching.loop_detect import LineLoopDetector
from services.scheduler.batching.stop_rules import StopState

EOS = 2


def run(pieces, stop=(), max_tokens=1000, loop=None, eos_at=None):
    """Feed pieces (token ids are 10 + index); return (emitted text, finish)."""
    state = StopState(max_tokens=max_tokens, stop=tuple(stop), eos_ids=frozenset({EOS}), loop=loop)
    out = []
    for i, piece in enumerate(pieces):
        emit, finish = state.feed(piece, EOS if i == eos_at else 10 + i)
        out.append(emit)
        if finish is not None:
            return out, finish
    return out, None


def test_stop_string_split_across_tokens_is_held_back_and_never_emitted():
    out, finish = run(["Hel", "lo E", "N", "D tail"], stop=("END",))
    assert out == ["Hel", "lo ", "", ""]
    assert "".join(out) == "Hello "
    assert finish.reason == "stop" and finish.stop_string == "END"


def test_held_text_is_released_once_it_cannot_start_a_stop_string():
    out, finish = run(["a E", "N", "x"], stop=("END",))
    assert out == ["a ", "", "ENx"] and finish is None


def test_text_before_a_stop_string_in_the_same_piece_is_emitted():
    out, finish = run(["abcENDxyz"], stop=("END",))
    assert out == ["abc"] and finish.stop_string == "END"


def test_earliest_matching_stop_string_wins():
    out, finish = run(["one ", "two three"], stop=("three", "two"))
    assert "".join(out) == "one " and finish.stop_string == "two"


def test_eos_stops_without_showing_its_text_and_flushes_held_text():
    out, finish = run(["ab", "E", "</s>"], stop=("END",), eos_at=2)
    assert "".join(out) == "abE"
    assert finish.reason == "stop" and finish.stop_token == EOS and finish.stop_string is None


def test_max_tokens_ends_with_length_and_the_last_piece_is_emitted():
    out, finish = run(["a", "b", "c", "d"], max_tokens=3)
    assert out == ["a", "b", "c"] and finish.reason == "length"


def test_length_finish_flushes_text_held_for_a_stop_string_that_never_came():
    out, finish = run(["a", "EN"], stop=("END",), max_tokens=2)
    assert "".join(out) == "aEN" and finish.reason == "length"


def loop():
    return LineLoopDetector(repeats=4, window=8, min_chars=8)


def test_same_line_four_times_stops_with_repeated_line_loop():
    line = "I am a helpful assistant.\n"
    out, finish = run([line] * 3 + ["I am a helpful ", "assistant.", "\n", "more"], loop=loop())
    assert finish.reason == "repeated_line_loop"
    assert finish.detail == "I am a helpful assistant."
    assert "".join(out) == line * 4


def test_three_repeats_do_not_stop():
    out, finish = run(["the same line here\n"] * 3 + ["something else entirely\n"], loop=loop())
    assert finish is None


def test_trivial_lines_never_count_as_a_loop():
    out, finish = run(["}\n", "\n", "  end  \n"] * 10, loop=loop())
    assert finish is None


def test_a_two_line_cycle_is_caught():
    out, finish = run(["first line of cycle\nsecond line of cycle\n"] * 4, loop=loop())
    assert finish.reason == "repeated_line_loop"


def test_repeats_far_apart_are_not_a_loop():
    pieces = []
    for i in range(4):
        pieces.append("return the value\n")
        pieces += [f"distinct line number {i}-{j}\n" for j in range(6)]
    out, finish = run(pieces, loop=loop())
    assert finish is None


texts = st.text(alphabet="abEND\n ", max_size=40)


@given(text=texts, stop=st.lists(st.text(alphabet="abEND", min_size=1, max_size=4), max_size=3),
       cuts=st.lists(st.integers(0, 40), max_size=10))
@example(text="DDND", stop=["N", "DND"], cuts=[3]).via("found by hypothesis: 'DND' starts first, 'N' ends first")
@example(text="DDND", stop=["N", "DND"], cuts=[])
def test_emitted_text_is_exactly_the_text_before_the_first_stop_string(text, stop, cuts):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])] + ["", ""]
    out, finish = run(pieces, stop=stop, max_tokens=len(pieces))
    # The stop string a character stream completes first (earliest end, then earliest start):
    # the answer must not depend on where the tokens split the text.
    hits = [(text.find(s) + len(s), text.find(s)) for s in stop if s in text]
    if hits:
        assert "".join(out) == text[:min(hits)[1]]
        assert finish.reason == "stop" and finish.stop_string in text
    else:
        assert "".join(out) == text and finish.reason == "length"
