"""`llmbus run` builds its parser from every kind's cli module; that must stay light, or
numpy loads before `--threads` is applied and a shard runs with the wrong BLAS thread count."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..bus.procs import ROOT, env

CHECK = ("import sys; from services.cli import build_parser; build_parser(); "
         "print(sorted(m for m in ('numpy', 'tokenizers', 'jinja2') if m in sys.modules))")


def test_building_the_llmbus_parser_loads_no_numpy():
    r = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_run_tokenizer_is_a_kind_with_a_model_option():
    from services.cli import build_parser
    args = build_parser().parse_args(["run", "tokenizer", "--model", "/m.gguf", "--no-mdns"])
    assert args.kind == "tokenizer" and str(args.model) == "/m.gguf"
