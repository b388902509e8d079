"""Render chat messages to a prompt with a Jinja chat template, in a sandbox, as HF does.

Templates come from the GGUF (`tokenizer.chat_template`, and `tokenizer.chat_template.NAME`)
or from the built-ins. A GGUF without a template is a base model: it has no default (a chat
raises NoChatTemplate, naming the built-in its vocabulary suggests) unless one is chosen
(`ChatTemplates.use`: `--chat-template NAME|FILE`).
The Jinja environment mirrors transformers' apply_chat_template (trim_blocks,
lstrip_blocks, loop controls, raise_exception, strftime_now, a non-ASCII-escaping tojson).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.ext import Extension

from services.tokenizer.builtin_templates import BUILTIN_TEMPLATES, DETECT_ORDER
from services.tokenizer.errors import (NoChatTemplate, TemplateError, TemplateOverLimit,
                                       UnknownTemplate)
from services.tokenizer.messages import normalize_messages
from services.tokenizer.template_limits import (PER_MESSAGE_CPU_S, RENDER_CPU_S,
                                                BoundedSandbox, render_bounded)
from services.tokenizer.tool_prompt import template_reads_tools

# What a model's own template gets for a small chat at load (a real one takes a millisecond):
# past it the template is hostile or broken, and the load fails within LOAD_CHECK_WALL_S.
LOAD_CHECK_CPU_S = 1.0
LOAD_CHECK_WALL_S = 3.0

GGUF_DEFAULT = "gguf"   # the name under which the GGUF's own template is chosen
CHOSEN_FILE = "file"    # the name of a template read from a file (--chat-template FILE)


class _RaisedByTemplate(Exception):
    pass


def _raise_exception(message: str) -> None:
    raise _RaisedByTemplate(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes HTML characters and ASCII-escapes; HF templates expect neither.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


class _GenerationTag(Extension):
    """HF's {% generation %}...{% endgeneration %} marks assistant text for training; rendered as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _environment() -> BoundedSandbox:
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols, _GenerationTag])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()


@lru_cache(maxsize=32)
def compile_template(source: str) -> jinja2.Template:
    """Compile once per distinct template text; a syntax error is a TemplateError."""
    try:
        return _ENV.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"chat template does not compile (line {e.lineno}): {e.message}") from e


@lru_cache(maxsize=32)
def reads_tools(source: str) -> bool:
    """Whether the template renders `tools` itself (else the built-in tool prompt is used)."""
    return template_reads_tools(_ENV, source)


def render(source: str, messages: Any, *, add_generation_prompt: bool = True,
           bos_token: str = "", eos_token: str = "", _limits: tuple[float, float | None] | None = None,
           **extra: Any) -> str:
    """The prompt text for `messages` (checked by normalize_messages) under template `source`,
    within the time and size limits (template_limits)."""
    template = compile_template(source)
    context = dict(extra)
    messages = normalize_messages(messages)
    context.update(messages=messages, add_generation_prompt=add_generation_prompt,
                   bos_token=bos_token, eos_token=eos_token)
    cpu_s, wall_s = _limits or (RENDER_CPU_S + PER_MESSAGE_CPU_S * len(messages), None)
    try:
        return render_bounded(template.generate(**context), cpu_s, wall_s)
    except TemplateOverLimit:
        raise
    except _RaisedByTemplate as e:
        raise TemplateError(f"chat template refused the messages: {e}") from e
    except (jinja2.TemplateError, TypeError, KeyError, IndexError, ValueError) as e:
        raise TemplateError(f"chat template failed to render: {type(e).__name__}: {e}") from e


class ChatTemplates:
    """The templates a model can be rendered with, found by name, with a default choice: the
    GGUF's own, or the one chosen with `use`; none for a base model (no template in its GGUF)."""

    def __init__(self, gguf_default: str | None, gguf_named: Mapping[str, str],
                 vocab_tokens: set[str] | frozenset[str] = frozenset()):
        self._sources: dict[str, str] = {}
        if gguf_default:
            self._sources[GGUF_DEFAULT] = gguf_default
        self._sources.update(gguf_named)
        self._from_gguf = list(self._sources)
        for name, source in BUILTIN_TEMPLATES.items():
            self._sources.setdefault(name, source)
        self.default_name: str | None = GGUF_DEFAULT if gguf_default else None
        # The built-in whose turn markers the vocabulary has, for the error a chat gets.
        self.suggested = _detect(vocab_tokens)

    def check_limits(self) -> None:
        """Render a small chat with each of the model's own templates: one that runs past the
        time or size limits is hostile or broken, and fails the load (TemplateOverLimit naming
        it). A template that only refuses this chat (raise_exception) is left to requests."""
        for name in self._from_gguf:
            try:
                render(self._sources[name], _SAMPLE_CHAT,
                       _limits=(LOAD_CHECK_CPU_S, LOAD_CHECK_WALL_S))
            except TemplateOverLimit as e:
                raise TemplateOverLimit(f"the model's chat template {name!r} is refused: "
                                        f"{e}") from None
            except TemplateError:
                pass

    @property
    def names(self) -> list[str]:
        return list(self._sources)

    def use(self, name: str | None = None, source: str | None = None) -> None:
        """Make `name` (a template of the GGUF or a built-in) the default, or `source` (a
        template's text, from a file) under the name "file"."""
        if source is not None:
            compile_template(source)          # a syntax error is said now, not per chat
            self._sources[CHOSEN_FILE] = source
            name = CHOSEN_FILE
        if name not in self._sources:
            raise UnknownTemplate(name, self.names)
        self.default_name = name

    def source(self, name: str | None = None) -> str:
        """Template text by name; None is the default (NoChatTemplate for a base model)."""
        key = self.default_name if name is None else name
        if key is None:
            raise NoChatTemplate(self.suggested)
        if key not in self._sources:
            raise UnknownTemplate(key, self.names)
        return self._sources[key]


_SAMPLE_CHAT = [{"role": "system", "content": "You are helpful."},
                {"role": "user", "content": "Hello?"}, {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": "What is 2 + 2?"}]


def _detect(vocab_tokens: set[str] | frozenset[str]) -> str | None:
    for marker, name in DETECT_ORDER:
        if marker in vocab_tokens:
            return name
    return None
