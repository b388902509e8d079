"""Typed errors of the scheduler policy, named for the caller that must react to them."""


class SchedulerError(Exception):
    """Base of every error the scheduler policy raises."""


class ConfigError(SchedulerError, ValueError):
    """A SchedulerConfig value is out of range; the message names the field."""


class BadRequest(SchedulerError, ValueError):
    """A request is refused as malformed; `reason` is a short tag, the message says what to fix."""

    reason = "bad_request"

    def __init__(self, detail: str):
        super().__init__(f"{self.reason}: {detail}")
        self.detail = detail


class BadRequestId(BadRequest):
    reason = "bad_request_id"


class EmptyPrompt(BadRequest):
    reason = "empty_prompt"


class BadTokenIds(BadRequest):
    reason = "bad_token_ids"


class PromptTooLong(BadRequest):
    reason = "prompt_too_long"

    def __init__(self, prompt_tokens: int, context_length: int):
        super().__init__(f"prompt has {prompt_tokens} tokens; the context holds {context_length} "
                         f"and needs room for at least one generated token: shorten the prompt")
        self.prompt_tokens = prompt_tokens
        self.context_length = context_length


class BadMaxTokens(BadRequest):
    reason = "bad_max_tokens"


class UnknownPriority(BadRequest):
    reason = "unknown_priority"


class BadStopStrings(BadRequest):
    reason = "bad_stop_strings"


class BadDeadline(BadRequest):
    reason = "bad_deadline"


class BadSeed(BadRequest):
    reason = "bad_seed"


class BadSampling(BadRequest):
    """A sampling parameter is out of its range; the message names it and the range."""

    reason = "bad_sampling"


class DuplicateRequest(BadRequest):
    reason = "duplicate_request_id"


class QueueFull(SchedulerError):
    """The waiting queue is at its bound; try again after `retry_after` seconds."""

    def __init__(self, retry_after: float, queued: int):
        super().__init__(f"queue full ({queued} waiting): retry after {retry_after:.1f} s")
        self.retry_after = retry_after
        self.queued = queued


class UnknownBatch(SchedulerError, LookupError):
    """No micro-batch with this id is in flight (already completed, aborted, or reset)."""


class BadCompletion(SchedulerError, ValueError):
    """The sampled tokens handed to complete() do not match the batch plan; nothing was applied."""


class BadReply(SchedulerError, ValueError):
    """The pipeline's reply to a batch does not match the batch (type, id, shapes, dtypes)."""
