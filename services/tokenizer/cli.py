"""`llmbus run tokenizer`: options of the tokenizer service (imported at parser build: keep it light)."""

from __future__ import annotations

import argparse
from pathlib import Path


CHAT_TEMPLATE_HELP = ("the chat template: a name (the GGUF's own, or a built-in: chatml, llama3, "
                      "gemma, mistral, zephyr) or a Jinja file; needed to chat with a base model "
                      "(a GGUF without a template)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, default=None,
                   help="GGUF file (default: the default model, pulled if missing)")
    p.add_argument("--chat-template", default=None, metavar="NAME|FILE", help=CHAT_TEMPLATE_HELP)


def chat_template(value: str | None, model: Path) -> str | None:
    """`--chat-template`, checked before anything starts: a template name the model has (a
    built-in or one in its GGUF), else a readable file (its absolute path)."""
    if value is None:
        return None
    from services.modelstore.gguf_meta import read_metadata
    from .builtin_templates import BUILTIN_TEMPLATES

    named = {k.removeprefix("tokenizer.chat_template.") for k in read_metadata(model)
             if k.startswith("tokenizer.chat_template.")}
    if value in BUILTIN_TEMPLATES or value in named or value == "gguf":
        return value
    path = Path(value)
    if path.is_file():
        return str(path.resolve())
    raise ValueError(f"--chat-template {value}: neither a template name "
                     f"({', '.join(sorted({*BUILTIN_TEMPLATES, *named}))}) nor a file")


def build(args: argparse.Namespace, config):
    from services.modelstore.pull import pull
    from .service import TokenizerConfig, TokenizerService

    model = args.model or pull()
    if not model.exists():
        raise SystemExit(f"llmbus run tokenizer: no model file at {model}")
    return TokenizerService(config, TokenizerConfig(
        model=model, chat_template=chat_template(args.chat_template, model)))
