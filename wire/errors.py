"""The errors of the frame format: one for what cannot be decoded, one for what may not be sent."""

from .failures import BAD_FRAME


class BadFrame(ValueError):
    """A message could not be decoded: truncated, oversized, wrong schema, unknown type...

    `reason` is a short machine-friendly tag (counted by services), the message says what.
    `msg_id` is the message's id when the header was readable, so the error reply reaches the
    caller waiting on it; 0 otherwise. `code` is the failure code the caller gets (wire.failures):
    bad_frame, or the typed refusal a message's own `check()` names (e.g. bad_sampling).
    """

    def __init__(self, reason: str, detail: str = "", msg_id: int = 0, code: str = BAD_FRAME):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.msg_id = msg_id
        self.code = code


class Oversized(ValueError):
    """A message too large to send (its header, a frame, or its frame count): refused on encode,
    because the receiver would drop it unread and its caller would wait for nothing.

    `what` names the part ("header", "frame 3", "frames"), `size` and `limit` are in bytes (or
    frames).
    """

    def __init__(self, what: str, size: int, limit: int):
        super().__init__(f"{what} of {size} {'frames' if what == 'frames' else 'bytes'} "
                         f"is over the limit of {limit}")
        self.what = what
        self.size = size
        self.limit = limit
