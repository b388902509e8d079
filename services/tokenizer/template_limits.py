"""Time and size limits on rendering a chat template: a template from a GGUF is code from the
model file, and the sandbox (no attribute escapes) does not stop it from looping for hours or
asking for gigabytes ('a' * 10**10).

- Size: `*`, `**` and `+` are checked before they run (a result over MAX_CHARS items, an
  exponent past MAX_EXPONENT), as are the widths given to str methods (ljust, center...), and
  the output is counted as it is rendered.
- Time: while a template's own code runs, a trace function checks the deadline on every line
  (only frames of template code are traced: the cost is on the template, not on Python).
"""

from __future__ import annotations


import sys
import time
from collections.abc import Iterator
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from services.tokenizer.errors import TemplateOverLimit

MAX_CHARS = 4 << 20         # of one value a template builds, and of its output
MAX_EXPONENT = 4096
RENDER_TIMEOUT_S = 2.0
_TEMPLATE_FILE = "<template>"  # the file name jinja2 compiles templates under
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


def render_bounded(chunks: Iterator[str], timeout_s: float = RENDER_TIMEOUT_S) -> str:
    """The text of a template's `generate()`, within the time and output limits."""
    deadline = time.monotonic() + timeout_s

    def on_line(frame, event, arg):
        if event == "line" and time.monotonic() > deadline:
            raise TemplateOverLimit(f"the chat template ran past its time limit of "
                                    f"{timeout_s:g} s")
        return on_line

    def on_call(frame, event, arg):
        return on_line if frame.f_code.co_filename == _TEMPLATE_FILE else None

    before = sys.gettrace()
    sys.settrace(on_call)
    try:
        out, size = [], 0
        for chunk in chunks:
            size += len(chunk)
            if size > MAX_CHARS:
                raise TemplateOverLimit(f"the chat template wrote more than {MAX_CHARS} "
                                        f"characters")
            out.append(chunk)
        return "".join(out)
    finally:
        sys.settrace(before)



