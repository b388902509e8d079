"""Why `llmbus chat` could not get an answer, typed for the terminal that reports it."""

from __future__ import annotations


class ChatError(Exception):
    """Why an answer could not be had, in one line a person can act on."""


class NoStack(ChatError):
    """No running stack matches what was asked for."""


class StackGone(ChatError):
    """The stack stopped answering (before or during an answer)."""


class Refused(ChatError):
    """The scheduler refused the request with a typed error (`code`), e.g. queue_full."""

    def __init__(self, code: str, text: str, retry_after: float | None = None):
        super().__init__(text)
        self.code = code
        self.retry_after = retry_after
