"""The one error a bad frame raises, whatever is wrong with it."""


class BadFrame(ValueError):
    """A message could not be decoded: truncated, oversized, wrong schema, unknown type...

    `reason` is a short machine-friendly tag (counted by services), the message says what.
    """

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
