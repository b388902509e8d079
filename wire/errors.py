"""The one error a bad frame raises, whatever is wrong with it."""


class BadFrame(ValueError):
    """A message could not be decoded: truncated, oversized, wrong schema, unknown type...

    `reason` is a short machine-friendly tag (counted by services), the message says what.
    `msg_id` is the message's id when the header was readable, so the error reply reaches the
    caller waiting on it; 0 otherwise. `code` is the bus error the caller gets: "bad_frame", or
    the typed refusal a message's own `check()` names (e.g. "bad_sampling").
    """

    def __init__(self, reason: str, detail: str = "", msg_id: int = 0, code: str = "bad_frame"):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.msg_id = msg_id
        self.code = code
