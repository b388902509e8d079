"""Chat templates: sandboxed Jinja as HF renders it, built-ins, choice by name, typed errors."""

import pytest

from services.tokenizer.builtin_templates import BUILTIN_TEMPLATES
from services.tokenizer.errors import BadMessages, NoChatTemplate, TemplateError, UnknownTemplate
from services.tokenizer.templates import GGUF_DEFAULT, ChatTemplates, render

CHAT = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Q"}]
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


@pytest.mark.parametrize("name, expected", [
    ("chatml", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
               "<|im_start|>assistant\nYo<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
               "<|im_start|>assistant\n"),
    ("llama3", "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("mistral", "<s>[INST] S\n\nHi [/INST]Yo</s>[INST] Q [/INST]"),
    ("gemma", "<s><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n"
              "<start_of_turn>user\nQ<end_of_turn>\n<start_of_turn>model\n"),
    ("zephyr", "<|system|>\nS</s>\n<|user|>\nHi</s>\n<|assistant|>\nYo</s>\n<|user|>\nQ</s>\n"
               "<|assistant|>\n"),
])
def test_builtin_templates(name, expected):
    assert render(BUILTIN_TEMPLATES[name], CHAT, **TOKENS) == expected


def test_generation_prompt_is_optional():
    out = render(BUILTIN_TEMPLATES["chatml"], CHAT[:2], add_generation_prompt=False)
    assert not out.endswith("<|im_start|>assistant\n")


def test_hf_whitespace_control():
    # trim_blocks and lstrip_blocks: block tags leave no newline or indent behind.
    src = ("{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n"
           "    {% endif %}\n{% endfor %}")
    assert render(src, CHAT) == "[Hi]\n[Q]\n"


def test_hf_helpers():
    src = ("{{ messages[0].content | tojson }}|{{ strftime_now('%Y') | length }}"
           "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.role }}"
           "{% endfor %}")
    assert render(src, [{"role": "user", "content": "東京"}]) == '"東京"|4user'


def test_generation_tag_renders_its_body():
    src = "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    assert render(src, CHAT[:2]) == "SHi"


def test_raise_exception_is_a_template_error():
    with pytest.raises(TemplateError, match="alternate"):
        render(BUILTIN_TEMPLATES["mistral"], [{"role": "assistant", "content": "x"}])


def test_syntax_error_is_a_template_error():
    with pytest.raises(TemplateError, match="does not compile"):
        render("{% for m in messages %}", CHAT)


@pytest.mark.parametrize("src", [
    "{{ messages.__class__.__mro__ }}",
    "{{ messages.append(1) }}",
    "{{ ''.__class__.__subclasses__() }}",
])
def test_sandbox_refuses_escapes_and_mutation(src):
    with pytest.raises(TemplateError, match="unsafe"):
        render(src, CHAT)


def test_messages_are_checked_before_rendering():
    with pytest.raises(BadMessages):
        render(BUILTIN_TEMPLATES["chatml"], [])


def test_gguf_template_is_the_default_and_named_ones_are_listed():
    t = ChatTemplates("GGUF {{ messages[0].content }}", {"tool_use": "TOOLS"})
    assert t.default_name == GGUF_DEFAULT
    assert t.source() == "GGUF {{ messages[0].content }}"
    assert t.source("tool_use") == "TOOLS"
    assert set(BUILTIN_TEMPLATES) <= set(t.names)


@pytest.mark.parametrize("specials, expected", [
    ({"<|im_start|>", "<|im_end|>"}, "chatml"),
    ({"<|begin_of_text|>", "<|start_header_id|>"}, "llama3"),
    ({"<start_of_turn>"}, "gemma"),
    ({"[INST]"}, "mistral"),
    ({"<|user|>"}, "zephyr"),
    (set(), None),
])
def test_without_gguf_template_there_is_no_default_and_the_vocabulary_suggests_one(specials,
                                                                                   expected):
    t = ChatTemplates(None, {}, frozenset(specials))
    assert t.default_name is None and t.suggested == expected
    with pytest.raises(NoChatTemplate) as e:
        t.source()
    assert "/v1/completions" in str(e.value) and "--chat-template NAME|FILE" in str(e.value)
    if expected:
        assert f"--chat-template {expected}" in str(e.value)


def test_a_chosen_template_becomes_the_default_by_name_or_from_a_file():
    t = ChatTemplates(None, {}, frozenset({"<start_of_turn>"}))
    t.use("gemma")
    assert t.default_name == "gemma" and t.source() == BUILTIN_TEMPLATES["gemma"]
    t.use(source="{{ messages[0].content }}")
    assert t.default_name == "file" and t.source() == "{{ messages[0].content }}"
    with pytest.raises(UnknownTemplate):
        t.use("nope")
    with pytest.raises(TemplateError):
        t.use(source="{% if %}")
    g = ChatTemplates("GGUF", {})
    g.use("chatml")               # a GGUF's own may be overridden too
    assert g.source() == BUILTIN_TEMPLATES["chatml"]


def test_unknown_template_name():
    with pytest.raises(UnknownTemplate, match="nope") as e:
        ChatTemplates(None, {}).source("nope")
    assert "chatml" in e.value.available
