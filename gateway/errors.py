"""Typed errors of the gateway, each with its HTTP status; every protocol renders them in its
own shape (see `Protocol.error`). A failure from the cluster gets its status from its code's
entry in wire.failures, never from its text."""

from __future__ import annotations

from bus.errors import BusError, RemoteError, code_of
from wire.failures import QUEUE_FULL, REQUEST_TOO_LARGE, failure


class GatewayError(Exception):
    """An answer to a client that is not a success: `status`, a `kind`, the field at fault."""

    status = 500
    kind = "internal"

    def __init__(self, message: str, param: str | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after = retry_after


class BadRequest(GatewayError):
    """Malformed JSON or a field of the wrong type or range; `param` names the field."""
    status, kind = 400, "bad_request"


class Unauthorized(GatewayError):
    status, kind = 401, "unauthorized"


class NotFound(GatewayError):
    """An unknown model id or path."""
    status, kind = 404, "not_found"


class MethodNotAllowed(GatewayError):
    status, kind = 405, "method_not_allowed"


class RequestTimeout(GatewayError):
    """The client did not send its body within the read deadline."""
    status, kind = 408, "timeout"


class Forbidden(GatewayError):
    """A request from a web page of another site, or for a host name this gateway is not."""
    status, kind = 403, "forbidden"


class BodyTooLarge(GatewayError):
    status, kind = 413, "too_large"


class UnsupportedMediaType(GatewayError):
    """A body that is not declared as JSON."""
    status, kind = 415, "unsupported_media_type"


class Overloaded(GatewayError):
    """The scheduler's queue is full: try again after `retry_after` seconds."""
    status, kind = 429, "overloaded"


class Unavailable(GatewayError):
    """No pipeline can serve now (starting, a service missing, draining)."""
    status, kind = 503, "unavailable"


class UpstreamFailed(GatewayError):
    """A request that was admitted failed in the cluster."""
    status, kind = 500, "internal"


class UpstreamTimeout(GatewayError):
    """The request's own deadline passed in the cluster before it finished."""
    status, kind = 504, "timeout"


# The class of each HTTP status a failure code may carry (wire.failures).
_BY_STATUS: dict[int, type[GatewayError]] = {400: BadRequest, 413: BodyTooLarge, 429: Overloaded,
                                             503: Unavailable, 504: UpstreamTimeout,
                                             500: UpstreamFailed}


def of_code(code: str, message: str, retry_after: float | None = None) -> GatewayError:
    """The answer to a failure `code`: its status, the field at fault, and Retry-After where a
    retry can help (the peer's hint, or 1 s), all from the code's entry in the table."""
    f = failure(code)
    hint = (retry_after or 1.0) if f.retry and f.http in (429, 503) else None
    return _BY_STATUS.get(f.http, UpstreamFailed)(message, param=f.field, retry_after=hint)


def failed_in_cluster(code: str, detail: str) -> GatewayError:
    """An admitted request the scheduler ended as failed, with its code and reason: e.g. a range
    no shard holds any more (503), a scheduler stopping (503, retry), its deadline (504)."""
    return of_code(code, f"the request failed in the cluster: {detail or 'no reason given'}")


def from_bus(e: BusError) -> GatewayError:
    """A bus failure as the error the HTTP client should see."""
    if isinstance(e, RemoteError):
        if e.code == QUEUE_FULL:
            return of_code(e.code, f"the cluster is busy ({e.message})", e.retry_after)
        return of_code(e.code, f"{e.code}: {e.message}", e.retry_after)
    code = code_of(e)
    if code == REQUEST_TOO_LARGE:
        return of_code(code, f"the request is too large to pass on to the cluster (send a "
                             f"shorter prompt, or fewer and shorter stop strings): {e}")
    return of_code(code, f"the cluster did not answer: {e}" if failure(code).retry else str(e))
