"""Errors a bus caller can catch by name."""

from __future__ import annotations

from wire.failures import (NOT_FOUND, PEER_DEAD, PEER_RESTARTED, REQUEST_TOO_LARGE, TIMEOUT,
                           UPSTREAM_FAILED)


class BusError(Exception):
    """Base of every error raised by the bus."""


class RemoteError(BusError):
    """The peer answered with a typed error (`bus.error`): `code` (wire.failures) is for code, the
    text for people."""

    def __init__(self, code: str, message: str, retry_after: float | None = None, peer: str = ""):
        super().__init__(f"{peer + ': ' if peer else ''}{code}: {message}")
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.peer = peer


class CallTimeout(BusError, TimeoutError):
    """No reply before the deadline: the peer may be dead, slow, or never got the request."""


class PeerRestarted(BusError):
    """The peer came back with a new epoch; a call sent to the old one will never be answered."""


class PeerDead(BusError):
    """The peer stopped heartbeating while a call to it was in flight; it will not answer."""


class ServiceNotFound(BusError):
    """No live service of that name is known; the message says what discovery saw."""


class ServiceError(BusError):
    """Raised inside a handler to answer with a typed `bus.error` reply; `code` from wire.failures."""

    def __init__(self, code: str, message: str, retry_after: float | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retry_after = retry_after


class MessageTooLarge(BusError):
    """A request too large to send was refused before sending (the peer would drop it unread):
    send less per call (page it), or call a service whose socket takes larger frames."""


class BadReply(BusError):
    """The peer's reply to this call could not be decoded; the peer is likely of another version."""


class ClientClosed(BusError):
    """The client was closed: calls in flight end with this, and it takes no new calls."""


def code_of(e: BusError) -> str:
    """The `bus.error` code a handler answers with when a call it made failed with `e`."""
    if isinstance(e, (RemoteError, ServiceError)):
        return e.code
    return _CODES.get(type(e), UPSTREAM_FAILED)


_CODES = {ServiceNotFound: NOT_FOUND, CallTimeout: TIMEOUT, PeerDead: PEER_DEAD,
          PeerRestarted: PEER_RESTARTED, MessageTooLarge: REQUEST_TOO_LARGE}
