"""Message types declared only for the wire tests: every schema feature once."""

from __future__ import annotations

from typing import Any

from wire import Tensor, message, record


@record
class Span:
    start: int
    stop: int

    def check(self):
        if not 0 <= self.start <= self.stop:
            raise ValueError(f"bad span [{self.start}, {self.stop})")


@record
class Item:
    name: str
    x: Tensor | None = None


@record
class Node:
    """A record that contains itself (a tree)."""
    label: str
    children: tuple[Node, ...] = ()


@message("test.wire.kitchen")
class Kitchen:
    """Every kind of field."""
    i: int
    f: float
    b: bool
    s: str
    raw: bytes
    spans: list[Span]
    weights: dict[str, float]
    dims: tuple[int, ...]
    maybe: int | None = None
    nested: Span | None = None
    extra: dict[str, Any] | None = None
    tree: Node | None = None

    def check(self):
        if self.i < 0:
            raise ValueError("i must be non-negative")


@message("test.wire.batch")
class Batch:
    ids: Tensor
    items: list[Item]


class OutOfRange(ValueError):
    code = "bad_range"   # the bus error a caller gets for it


@record
class Window:
    """A record a message extends: its fields go flat on the wire with the message's own."""
    lo: int = 0
    hi: int = 10

    def check(self):
        if not 0 <= self.lo <= self.hi:
            raise OutOfRange(f"window [{self.lo}, {self.hi}] is empty or negative")


@message("test.wire.windowed")
class Windowed(Window):
    name: str = ""

    def check(self):
        super().check()
        if not self.name:
            raise ValueError("name must not be empty")
