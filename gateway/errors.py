"""Typed errors of the gateway, each with its HTTP status; every protocol renders them in its
own shape (see `Protocol.error`)."""

from __future__ import annotations

from bus.errors import BusError, CallTimeout, PeerDead, PeerRestarted, RemoteError, ServiceNotFound


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


class BodyTooLarge(GatewayError):
    status, kind = 413, "too_large"


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


# Scheduler and tokenizer refusals that are the client's fault, with the field to name.
_CLIENT_CODES = {
    "bad_sampling": None, "prompt_too_long": "messages", "bad_max_tokens": "max_tokens",
    "bad_stop_strings": "stop", "bad_seed": "seed", "empty_prompt": "prompt",
    "bad_token_ids": "prompt", "bad_messages": "messages", "template_error": "messages",
    "unknown_template": "messages", "text_too_long": "messages", "bad_token_id": "tokens",
    "bad_request": None, "bad_request_id": None, "duplicate_request_id": None,
}
_UNAVAILABLE_CODES = {"starting", "draining", "loading", "tokenizer_unavailable", "not_found",
                      "timeout", "peer_dead", "peer_restarted", "no_directory", "range_failed"}


def failed_in_cluster(detail: str) -> GatewayError:
    """An admitted request the scheduler ended as failed, by its reason: a range no shard holds
    any more or a scheduler stopping is the cluster being unavailable (503), a passed deadline is
    a timeout (504), anything else an internal failure (500)."""
    message = f"the request failed in the cluster: {detail or 'no reason given'}"
    if detail.startswith("range_failed"):
        return Unavailable(message)
    if detail.startswith("the scheduler stopped"):
        return Unavailable(message, retry_after=1.0)
    if detail.startswith("deadline"):
        return UpstreamTimeout(message)
    return UpstreamFailed(message)


def from_bus(e: BusError) -> GatewayError:
    """A bus failure as the error the HTTP client should see."""
    if isinstance(e, RemoteError):
        if e.code == "queue_full":
            return Overloaded(f"the cluster is busy ({e.message})", retry_after=e.retry_after or 1.0)
        if e.code in _CLIENT_CODES:
            return BadRequest(f"{e.code}: {e.message}", param=_CLIENT_CODES[e.code])
        if e.code in _UNAVAILABLE_CODES:
            return Unavailable(f"{e.code}: {e.message}", retry_after=e.retry_after or 1.0)
        return UpstreamFailed(f"{e.code}: {e.message}")
    if isinstance(e, (PeerDead, PeerRestarted, ServiceNotFound, CallTimeout)):
        return Unavailable(f"the cluster did not answer: {e}", retry_after=1.0)
    return UpstreamFailed(str(e))
