"""Token bytes: GPT-2's byte table inverts exactly; encode is safe from several threads."""

from concurrent.futures import ThreadPoolExecutor

from services.tokenizer.token_bytes import gpt2_byte_to_unicode, token_bytes_table
from services.tokenizer.tokenizer import Tokenizer
from services.tokenizer.vocab import TokenType, Vocab


def test_gpt2_table_is_a_bijection_onto_printable_chars():
    table = gpt2_byte_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert all(c.isprintable() and not c.isspace() for c in table.values())
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("A")] == "A"


def test_every_byte_token_reads_back_as_its_byte():
    chars = [gpt2_byte_to_unicode()[b] for b in range(256)]
    vocab = Vocab(model="gpt2", pre="gpt-2", tokens=[*chars, "ĠhÃ©", "<|x|>", "plain text"],
                  token_types=[TokenType.NORMAL] * 257 + [TokenType.CONTROL, TokenType.NORMAL])
    table = token_bytes_table(vocab, special=True)
    assert table[:256] == [bytes([b]) for b in range(256)]
    assert table[256] == " hé".encode()
    assert table[257] == b"<|x|>"
    assert table[258] == b"plain text"  # a raw space is no byte-level spelling: kept as text
    assert token_bytes_table(vocab)[257] == b""


def test_concurrent_encodes_keep_their_own_parse_special(bpe_gguf):
    tok = Tokenizer.from_gguf(bpe_gguf)
    text = "hello<|endoftext|>world"
    want = {True: tok.encode(text, parse_special=True), False: tok.encode(text)}
    assert want[True] != want[False]
    flags = [i % 2 == 0 for i in range(2000)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda f: tok.encode(text, parse_special=f), flags))
    assert all(g == want[f] for g, f in zip(got, flags))
