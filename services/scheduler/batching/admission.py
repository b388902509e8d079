"""Checks a request before it is queued; clamps max_tokens to the context and says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import SchedulerConfig
from .errors import (BadDeadline, BadRequest, BadMaxTokens, BadRequestId, BadSampling, BadSeed, BadStopStrings, BadTokenIds,
                     EmptyPrompt, PromptTooLong, UnknownPriority)
from .sequence import PRIORITIES, Request
from .stop_rules import Finish

# A week: a deadline past it is a client's bug, not a budget.
MAX_DEADLINE_S = 7 * 24 * 3600.0

if TYPE_CHECKING:  # the policy stays importable without wire (and numpy): `llmbus run` builds
    from wire.messages.sampling import SamplingParams   # its parser from this package

# Every event of a stream carries the id back: a megabyte id would make each reply a megabyte.
MAX_REQUEST_ID_CHARS = 256


@dataclass(frozen=True)
class Admission:
    """submit()'s answer: the max_tokens that will apply, and a note when it was clamped."""

    request_id: str
    max_tokens: int
    clamped: bool = False
    note: str = ""
    # A continuation whose tokens already ended it (its scheduler was lost between its last
    # tokens and its finish): the finish, and nothing is queued.
    finished: Finish | None = None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate(request: Request, config: SchedulerConfig) -> Admission:
    """Raise the BadRequest subclass naming what is wrong, or return the admission terms."""
    prompt = request.prompt
    if not isinstance(request.request_id, str) or not request.request_id:
        raise BadRequestId("request_id must be a non-empty string")
    if len(request.request_id) > MAX_REQUEST_ID_CHARS:
        raise BadRequestId(f"request_id of {len(request.request_id)} characters; at most "
                           f"{MAX_REQUEST_ID_CHARS}")
    if len(prompt) == 0:
        raise EmptyPrompt("the prompt has no tokens")
    if request.pooling:
        return _validate_embedding(request, config)
    if len(prompt) >= config.context_length:  # before the per-id checks: a list may hold 10^6
        raise PromptTooLong(len(prompt), config.context_length)
    limit = config.vocab_size
    for t in prompt:
        if not _is_int(t) or t < 0 or (limit is not None and t >= limit):
            raise BadTokenIds(f"token id {t!r} is not in [0, {limit or 'vocab'})")
    _check_generated(request, config)
    if request.priority not in PRIORITIES:
        raise UnknownPriority(f"priority {request.priority!r} is not one of {sorted(PRIORITIES)}")
    mt = request.max_tokens
    if not _is_int(mt) or mt < 1 or mt > config.max_tokens_limit:
        raise BadMaxTokens(f"max_tokens {mt!r} must be an integer in [1, {config.max_tokens_limit}]")
    if not _is_int(request.seed):
        raise BadSeed(f"seed {request.seed!r} must be an integer")
    _check_stop(request.stop, config)
    d = request.deadline_s
    if d is not None and (isinstance(d, bool) or not isinstance(d, (int, float))
                          or not 0 < d <= MAX_DEADLINE_S):   # NaN fails too
        raise BadDeadline(f"deadline_s {d!r} must be a number of seconds in (0, {MAX_DEADLINE_S:g}]")
    room = config.context_length - len(prompt)
    if room < 1:
        raise PromptTooLong(len(prompt), config.context_length)
    if mt > room:
        return Admission(request.request_id, room, True,
                         f"max_tokens {mt} clamped to {room}: prompt {len(prompt)} + max_tokens "
                         f"must fit the context of {config.context_length}")
    return Admission(request.request_id, mt)


POOLINGS = ("mean", "cls", "last")


def _validate_embedding(request: Request, config: SchedulerConfig) -> Admission:
    """An embedding generates nothing: its input may fill the whole context."""
    prompt = request.prompt
    if request.pooling not in POOLINGS:
        raise BadRequest(f"pooling {request.pooling!r} is not one of {POOLINGS}")
    if len(prompt) > config.context_length:
        raise PromptTooLong(len(prompt), config.context_length)
    limit = config.vocab_size
    for t in prompt:
        if not _is_int(t) or t < 0 or (limit is not None and t >= limit):
            raise BadTokenIds(f"token id {t!r} is not in [0, {limit or 'vocab'})")
    if request.generated:
        raise BadTokenIds("an embedding has no generated tokens to continue from")
    if request.priority not in PRIORITIES:
        raise UnknownPriority(f"priority {request.priority!r} is not one of {sorted(PRIORITIES)}")
    d = request.deadline_s
    if d is not None and (isinstance(d, bool) or not isinstance(d, (int, float))
                          or not 0 < d <= MAX_DEADLINE_S):
        raise BadDeadline(f"deadline_s {d!r} must be a number of seconds in (0, {MAX_DEADLINE_S:g}]")
    return Admission(request.request_id, 0)


def _check_generated(request: Request, config: SchedulerConfig) -> None:
    """A continuation's tokens: ids of the vocabulary, no more than max_tokens, and the whole
    within the context (as many as either allows: the finish they reached comes at once)."""
    generated = request.generated
    if isinstance(generated, (str, bytes)) or not isinstance(generated, (tuple, list)):
        raise BadTokenIds("continued must be a list of token ids")
    if not generated:
        return
    if len(request.prompt) + len(generated) > config.context_length:
        raise PromptTooLong(len(request.prompt) + len(generated), config.context_length)
    if _is_int(request.max_tokens) and len(generated) > request.max_tokens:
        raise BadMaxTokens(f"a continuation of {len(generated)} tokens is more than "
                           f"max_tokens {request.max_tokens}")
    limit = config.vocab_size
    for t in generated:
        if not _is_int(t) or t < 0 or (limit is not None and t >= limit):
            raise BadTokenIds(f"continued token id {t!r} is not in [0, {limit or 'vocab'})")


def check_sampling(params: SamplingParams) -> SamplingParams:
    """The request's sampling parameters with their seed fixed, or BadSampling naming the field
    out of range: nothing a shard's sampler cannot take gets past admission."""
    if not callable(getattr(params, "validate", None)):
        raise BadSampling(f"sampling parameters must be SamplingParams, not {type(params).__name__}")
    try:
        params.validate()   # every range, declared once with the fields
    except ValueError as e:
        raise BadSampling(str(e)) from None
    return params.resolved()


def _check_stop(stop, config: SchedulerConfig) -> None:
    if isinstance(stop, str) or not isinstance(stop, (tuple, list)):
        raise BadStopStrings("stop must be a list of strings")
    if len(stop) > config.max_stop_strings:
        raise BadStopStrings(f"{len(stop)} stop strings; at most {config.max_stop_strings}")
    for s in stop:
        if not isinstance(s, str) or not s or len(s) > config.max_stop_chars:
            raise BadStopStrings(f"stop string {s!r} must be a non-empty string of at most "
                                 f"{config.max_stop_chars} characters")
