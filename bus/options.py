"""Command-line options derived from a service's config dataclass, so that a setting's name,
default and help are declared once, on its field:

    @dataclass(frozen=True)
    class Config:
        max_queue: int = option(256, "waiting requests; past it one is refused")
        pace_step_s: float = option(0.12, "a batch's target compute", flag="--pace-ms", per=1000)

    add_options(parser, Config)          # --max-queue (default: 256), --pace-ms (default: 120)
    Config(**options_of(Config, args))   # the values given, in the field's own unit

A field whose default is a tuple is a repeatable option (`--cors-origin A --cors-origin B`).
Fields without `option` are no options (settings a service sets itself). Reading a dataclass's
fields imports nothing: a command's parser is built before numpy loads.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any


def option(default: Any, help: str, *, flag: str | None = None, metavar: str | None = None,
           parse: Callable[[str], Any] | None = None, choices: Sequence[Any] | None = None,
           per: int = 1) -> Any:
    """A config field that is also a command-line option. `flag` names it (default: --the-name),
    `parse` reads its text (default: the default's type), `per` is how many of the option's unit
    make one of the field's (--pace-ms for a field in seconds: 1000)."""
    return dataclasses.field(default=default, metadata={"option": {
        "help": help, "flag": flag, "metavar": metavar, "parse": parse, "choices": choices,
        "per": per}})


def _options(cls: type, only: Sequence[str] | None = None) -> list[tuple[dataclasses.Field, dict]]:
    return [(f, f.metadata["option"]) for f in dataclasses.fields(cls)
            if "option" in f.metadata and (only is None or f.name in only)]


def flag_of(f: dataclasses.Field, o: dict) -> str:
    return o["flag"] or "--" + f.name.replace("_", "-")


def add_options(parser: argparse.ArgumentParser | Any, cls: type,
                only: Sequence[str] | None = None) -> None:
    """An option for each `option` field of `cls` (those named in `only`, when given), its
    default shown in the option's unit."""
    for f, o in _options(cls, only):
        default = f.default
        shown = round(default * o["per"], 9) if o["per"] != 1 else default
        repeated = isinstance(default, tuple)
        parse = o["parse"] or (str if repeated or default is None else type(default))
        if repeated:
            shown = ", ".join(default) or None
        parser.add_argument(flag_of(f, o), dest=f.name, default=None, type=parse,
                            action="append" if repeated else "store",
                            metavar=o["metavar"], choices=o["choices"],
                            help=o["help"] if shown in ("", None) or "default" in o["help"]
                            else f"{o['help']} (default: {_text(shown)})")


def options_of(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The `option` fields given on the command line, in their fields' units (an option left
    out is left to the field's default)."""
    out = {}
    for f, o in _options(cls):
        value = getattr(args, f.name, None)
        if isinstance(value, list):
            out[f.name] = tuple(value)
        elif value is not None:
            out[f.name] = value / o["per"] if o["per"] != 1 else value
    return out


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "none" if value is None else str(value)


def argv_of(cls: type, args: argparse.Namespace, only: Sequence[str] | None = None) -> list[str]:
    """The options of `cls` given on this command line, as arguments for a child command that
    takes the same options (`llmbus up` hands them to the services it starts)."""
    out = []
    for f, o in _options(cls, only):
        value = getattr(args, f.name, None)
        for v in value if isinstance(value, list) else [] if value is None else [value]:
            out += [flag_of(f, o), str(v)]
    return out
