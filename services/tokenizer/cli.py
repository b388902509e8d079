"""`llmbus run tokenizer`: options of the tokenizer service (imported at parser build: keep it light)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, default=None,
                   help="GGUF file (default: the default model, pulled if missing)")


def build(args: argparse.Namespace, config):
    from services.modelstore.pull import pull
    from .service import TokenizerConfig, TokenizerService

    model = args.model or pull()
    if not model.exists():
        raise SystemExit(f"llmbus run tokenizer: no model file at {model}")
    return TokenizerService(config, TokenizerConfig(model=model))
