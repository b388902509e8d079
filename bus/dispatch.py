"""Handlers found by message type: the decorators that mark them and the table built from them."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import wire

Handler = Callable[[Any, wire.Message], Awaitable[Any]]


def handles(msg_cls: type, eager: bool = False) -> Callable[[Handler], Handler]:
    """Mark a method as the handler of one message type. `eager`: the request loop runs it as
    it reads the request, up to its first suspension, instead of in a task that waits for a turn
    of the event loop (bus.eager): for a handler whose caller waits on every microsecond, as a
    shard's forward. The next request is read only after that first step."""

    def mark(fn: Handler) -> Handler:
        fn.__handles__ = msg_cls.TYPE
        fn.__eager__ = eager
        return fn

    return mark


def streams(msg_cls: type) -> Callable[[Handler], Handler]:
    """Mark an async generator method as the streaming handler of one message type."""

    def mark(fn: Handler) -> Handler:
        fn.__handles__ = msg_cls.TYPE
        fn.__streams__ = True
        return fn

    return mark


def receives(msg_cls: type) -> Callable[[Callable[[Any, wire.Message], None]], Callable]:
    """Mark a plain (not async) method as the handler of a one-way message type: the request loop
    calls it as the message is read, and nothing is answered (see RpcClient.tell). It must not
    block; what it raises is counted and logged, and the loop goes on."""

    def mark(fn: Callable) -> Callable:
        fn.__handles__ = msg_cls.TYPE
        fn.__one_way__ = True
        return fn

    return mark


def handler_table(cls: type) -> dict[str, Handler]:
    """Message type -> handler over a class and its bases; a subclass's handler wins."""
    table: dict[str, Handler] = {}
    for klass in reversed(cls.__mro__):
        for attr in vars(klass).values():
            t = getattr(attr, "__handles__", None)
            if t is not None:
                table[t] = attr
    return table


def is_stream(handler: Handler) -> bool:
    return getattr(handler, "__streams__", False)


def is_eager(handler: Handler | None) -> bool:
    return getattr(handler, "__eager__", False)


def is_one_way(handler: Handler | None) -> bool:
    return getattr(handler, "__one_way__", False)
