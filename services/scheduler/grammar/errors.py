"""The grammar's errors, apart from llguidance: the driver and the service catch them."""


class BadFormat(ValueError):
    """The format is not one we support, or its schema or grammar is not valid."""


class GrammarError(RuntimeError):
    """The matcher cannot follow the request's tokens (one it did not allow was drawn)."""


def first_line(text: str) -> str:
    """An llguidance error as one short line."""
    return (text or "the grammar failed").strip().splitlines()[0][:300]
