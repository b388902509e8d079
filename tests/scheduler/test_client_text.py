"""The text a client sees of its generated tokens: characters never split, stop strings cut, the
tail of an unfinished character shown only where the text so far is the answer."""

from services.scheduler.batching.client_text import ClientText
from services.scheduler.batching.stop_rules import StopState
from services.tokenizer.stream import IncrementalDecoder

EOS = 0
EURO = "€".encode()                      # 3 bytes: e2 82 ac
TABLE = (b"", b"Hi ", EURO[:1], EURO[1:2], EURO[2:], b"EN", b"D!", b"ok")


def feed(tokens, **stop):
    text = ClientText(IncrementalDecoder(TABLE),
                      StopState(max_tokens=stop.pop("max_tokens", 100), eos_ids=frozenset({EOS}),
                                **stop))
    pieces, finish = [], None
    for t in tokens:
        piece, finish = text.accept(t)
        pieces.append(piece)
        if finish is not None:
            break
    return pieces, finish


def test_a_character_split_over_tokens_is_shown_once_whole():
    pieces, finish = feed([1, 2, 3, 4, 7])
    assert pieces == ["Hi ", "", "", "€", "ok"] and finish is None


def test_a_stop_string_split_over_tokens_is_cut_with_what_follows():
    pieces, finish = feed([1, 5, 6, 7], stop=("END",))
    assert "".join(pieces) == "Hi " and finish.stop_string == "END"


def test_at_max_tokens_held_text_and_an_unfinished_character_are_flushed():
    pieces, finish = feed([5, 2, 3], stop=("END",), max_tokens=3)
    # "EN" was held for a stop string that never came; e2 82 can never complete: U+FFFD.
    assert finish.reason == "length" and "".join(pieces) == "EN\ufffd"


def test_at_eos_an_unfinished_character_is_dropped():
    pieces, finish = feed([1, 2, EOS])
    assert finish.reason == "stop" and finish.stop_token == EOS and "".join(pieces) == "Hi "
