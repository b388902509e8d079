"""Time and size limits on rendering a chat template: a template from a GGUF is code from the
model file, and the sandbox (no attribute escapes) does not stop it from looping for hours or
asking for gigabytes ('a' * 10**10).

- Size: `*`, `**` and `+` are checked before they run (a result over MAX_CHARS items, an
  exponent past MAX_EXPONENT), as are the widths given to str methods (ljust, center...), and
  the output is counted as it is rendered.
- Time: a watchdog thread (template_watchdog.py) looks at the rendering thread's CPU time
  every few milliseconds and, past its limit, raises into it: nothing is paid per template
  line (a trace function of every line made a 35,000-message chat take 4x the CPU). A chat
  gets RENDER_CPU_S and PER_MESSAGE_CPU_S per message (a real template takes microseconds a
  message); CPU time, so a loaded machine does not fail a long chat, with a wall-time
  backstop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from services.tokenizer.errors import TemplateOverLimit
from services.tokenizer.template_watchdog import OverTime, watchdog

MAX_CHARS = 4 << 20         # of one value a template builds, and of its output
MAX_EXPONENT = 4096
RENDER_CPU_S = 2.0           # a chat's render: this, and PER_MESSAGE_CPU_S per message, of CPU
PER_MESSAGE_CPU_S = 1e-3
WALL_PER_CPU = 10.0          # wall time allowed per second of CPU (a loaded machine)
_WIDTH_METHODS = frozenset({"ljust", "rjust", "center", "zfill", "expandtabs"})


class BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+"})

    def call_binop(self, context, op: str, left: Any, right: Any) -> Any:
        if op == "**" and isinstance(right, int) and abs(right) > MAX_EXPONENT \
                and isinstance(left, int) and abs(left) > 1:
            raise TemplateOverLimit(f"the chat template computes {left} ** {right}: "
                                    f"exponents past {MAX_EXPONENT} are refused")
        if op == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    _check_size(len(seq) * n, "repeats a value")
        if op == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, type(left)):
            _check_size(len(left) + len(right), "joins two values")
        return super().call_binop(context, op, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's signature)
        if getattr(__obj, "__name__", "") in _WIDTH_METHODS:
            for a in args:
                if isinstance(a, int):
                    _check_size(a, f"pads a text ({__obj.__name__})")
        return super().call(__context, __obj, *args, **kwargs)


def _check_size(n: int, what: str) -> None:
    if n > MAX_CHARS:
        raise TemplateOverLimit(f"the chat template {what} into {n} items, over the limit of "
                                f"{MAX_CHARS}")


def render_bounded(chunks: Iterator[str], cpu_s: float = RENDER_CPU_S,
                   wall_s: float | None = None) -> str:
    """The text of a template's `generate()`, within the output limit and `cpu_s` seconds of
    this thread's CPU time (a loaded machine does not make a long chat fail), and `wall_s`
    seconds of wall time at most (default: WALL_PER_CPU times `cpu_s`)."""
    watch = watchdog().watch(cpu_s, WALL_PER_CPU * cpu_s if wall_s is None else wall_s)
    try:
        try:
            text = _collect(chunks)
        finally:
            watchdog().release(watch)    # its exception, if not raised yet, never will be
    except OverTime:
        pass
    if watch.fired:
        raise TemplateOverLimit(f"the chat template ran past its time limit of {cpu_s:g} s")
    return text


def _collect(chunks: Iterator[str]) -> str:
    out, size = [], 0
    for chunk in chunks:
        size += len(chunk)
        if size > MAX_CHARS:
            raise TemplateOverLimit(f"the chat template wrote more than {MAX_CHARS} characters")
        out.append(chunk)
    return "".join(out)
