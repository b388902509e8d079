"""Typed errors of the scheduler policy, named for the caller that must react to them."""

from wire import failures


class SchedulerError(Exception):
    """Base of every error the scheduler policy raises."""


class ConfigError(SchedulerError, ValueError):
    """A SchedulerConfig value is out of range; the message names the field."""


class BadRequest(SchedulerError, ValueError):
    """A request is refused as malformed; `reason` is its failure code (wire.failures), the
    message says what to fix."""

    reason = failures.BAD_REQUEST

    def __init__(self, detail: str):
        super().__init__(f"{self.reason}: {detail}")
        self.detail = detail


class BadRequestId(BadRequest):
    reason = failures.BAD_REQUEST_ID


class EmptyPrompt(BadRequest):
    reason = failures.EMPTY_PROMPT


class BadTokenIds(BadRequest):
    reason = failures.BAD_TOKEN_IDS


class PromptTooLong(BadRequest):
    reason = failures.PROMPT_TOO_LONG

    def __init__(self, prompt_tokens: int, context_length: int):
        super().__init__(f"prompt has {prompt_tokens} tokens; the context holds {context_length} "
                         f"and needs room for at least one generated token: shorten the prompt")
        self.prompt_tokens = prompt_tokens
        self.context_length = context_length


class BadMaxTokens(BadRequest):
    reason = failures.BAD_MAX_TOKENS


class UnknownPriority(BadRequest):
    reason = failures.UNKNOWN_PRIORITY


class BadStopStrings(BadRequest):
    reason = failures.BAD_STOP_STRINGS


class BadDeadline(BadRequest):
    reason = failures.BAD_DEADLINE


class BadSeed(BadRequest):
    reason = failures.BAD_SEED


class BadSampling(BadRequest):
    """A sampling parameter is out of its range; the message names it and the range."""

    reason = failures.BAD_SAMPLING


class DuplicateRequest(BadRequest):
    reason = failures.DUPLICATE_REQUEST


class QueueFull(SchedulerError):
    """The waiting queue is at its bound; try again after `retry_after` seconds."""

    def __init__(self, retry_after: float, queued: int):
        super().__init__(f"queue full ({queued} waiting): retry after {retry_after:.1f} s")
        self.retry_after = retry_after
        self.queued = queued


class UnknownBatch(SchedulerError, LookupError):
    """No micro-batch with this id is in flight (already completed, aborted, or reset)."""


class BadCompletion(SchedulerError, ValueError):
    """The sampled tokens handed to complete() do not match the micro-batch; nothing was applied."""


class BadReply(SchedulerError, ValueError):
    """The pipeline's reply to a batch does not match the batch (type, id, shapes, dtypes)."""
