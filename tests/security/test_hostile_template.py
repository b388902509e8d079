"""Finding: a hostile chat template in a GGUF hung the tokenizer (nested loops: no time limit)
or asked for 10 GB ('a'*10**10). Templates render under time and size limits; one that breaks
them fails the model's load within 5 s, naming why. The sandbox still blocks escapes."""

from __future__ import annotations

import time

import pytest

from services.tokenizer.errors import TemplateError
from services.tokenizer.templates import render
from services.tokenizer.tokenizer import Tokenizer
from tests.tokenizer.conftest import tiny_bpe_kv, write_gguf

HOSTILE = {
    "nested loops": "{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}"
                    "{% endfor %}",
    "10 GB string": "{{ 'a' * 10**10 }}",
    "padding": "{{ ''.ljust(10**10) }}",
    "doubling": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    "endless output": "{% for a in range(99999) %}{% for b in range(99999) %}xxxxxxxx"
                      "{% endfor %}{% endfor %}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_template_fails_the_load_within_5_s(tmp_path, name):
    path = write_gguf(tmp_path / "hostile.gguf",
                      {**tiny_bpe_kv(), "add_chat_template": HOSTILE[name]})
    started = time.monotonic()
    with pytest.raises(TemplateError, match="chat template 'gguf' is refused"):
        Tokenizer.from_gguf(path)
    assert time.monotonic() - started < 5.0


def test_an_ordinary_template_loads(tmp_path):
    path = write_gguf(tmp_path / "ok.gguf", {**tiny_bpe_kv(), "add_chat_template":
                      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"})
    tok = Tokenizer.from_gguf(path)
    assert tok.render_chat([{"role": "user", "content": "hello"}]) == "user: hello\n"


@pytest.mark.parametrize("escape", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__.__init__.__globals__ }}",
    "{{ raise_exception.__globals__['sys'] }}",
])
def test_the_sandbox_still_blocks_escapes(escape):
    with pytest.raises(TemplateError):
        render(escape, [{"role": "user", "content": "hi"}])
