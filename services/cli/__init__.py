"""`llmbus`: run services, pull models. Each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import os
import sys


def _pull(args: argparse.Namespace) -> int:
    from services.modelstore.pull import MODELS, PullError, pull
    try:
        path = pull(MODELS[args.model], quiet=args.quiet)
    except PullError as e:
        print(f"llmbus pull: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


def version() -> str:
    """The installed package's version (pyproject.toml's, as pip recorded it)."""
    from importlib.metadata import PackageNotFoundError, version as installed
    try:
        return installed("llmbus")
    except PackageNotFoundError:
        return "unknown (not installed: run `pip install -e .`)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmbus", description=__doc__)
    p.add_argument("--version", action="version", version=f"llmbus {version()}")
    sub = p.add_subparsers(dest="command", required=True)
    from services.modelstore.pull import DEFAULT_MODEL, MODELS
    pull = sub.add_parser("pull", help="fetch a model into the cache (sha256-checked); prints its path")
    pull.add_argument("model", nargs="?", default=DEFAULT_MODEL.name, choices=sorted(MODELS),
                      help=f"which model (default {DEFAULT_MODEL.name})")
    pull.add_argument("-q", "--quiet", action="store_true",
                      help="no download progress on stderr (bytes, rate, time left)")
    pull.set_defaults(func=_pull)
    from . import chat, generate, keygen, run, units, up
    run.add_parser(sub, dict(os.environ))
    keygen.add_parser(sub)
    up.add_parser(sub)
    units.add_parser(sub)
    generate.add_parser(sub)
    chat.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
