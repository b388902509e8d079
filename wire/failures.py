"""Failure codes: every refusal (a `bus.error`) and every failed finish (`scheduler.done`) names
one, declared here once with what a caller decides by: the HTTP status a gateway answers with,
and whether the same request, sent again later, can succeed. The text beside a code is for
people; callers decide by the code alone, never by the text.

    raise ServiceError(QUEUE_FULL, "256 waiting: retry after 2 s", retry_after=2.0)
    failure(e.code).http     # 429
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    """One code of the table."""
    code: str
    http: int                  # the HTTP status a gateway answers with
    retry: bool                # whether sending the same request again (later) can succeed
    meaning: str               # what happened, for people (docs, busctl)
    field: str | None = None   # the request field at fault, where a client sent something wrong


TABLE: dict[str, Failure] = {}


def _code(code: str, http: int, retry: bool, meaning: str, field: str | None = None) -> str:
    if code in TABLE:
        raise ValueError(f"failure code {code!r} declared twice")
    TABLE[code] = Failure(code, http, retry, meaning, field)
    return code


def failure(code: str) -> Failure:
    """The table's entry for `code`. A code not in it (from a peer of another version) reads as a
    server failure (500) that may pass: a pipeline is tried again before its requests fail."""
    return TABLE.get(code) or Failure(code, 500, True, "a failure this version does not know")


# ---- any service, on the bus (bus.requests, bus.client, bus.errors.code_of)
BAD_FRAME = _code("bad_frame", 500, False, "a message could not be decoded (truncated, oversized, "
                  "wrong schema, unknown type)")
BAD_REPLY = _code("bad_reply", 500, False, "a reply (or a batch's results) did not fit the call")
BUSY = _code("busy", 503, True, "the service is at its limit of requests at once")
DRAINING = _code("draining", 503, True, "the service is shutting down")
DEADLINE_EXCEEDED = _code("deadline_exceeded", 504, True, "a message arrived after its own "
                          "deadline, or had no time left to go on")
INTERNAL = _code("internal", 500, False, "a bug: the handler raised")
UNKNOWN_METHOD = _code("unknown_method", 500, False, "the service does not handle that message")
TOO_LARGE = _code("too_large", 500, False, "a reply too large to send")
NO_DIRECTORY = _code("no_directory", 503, False, "the service runs without discovery")
NOT_FOUND = _code("not_found", 503, True, "no live service of that name is known")
TIMEOUT = _code("timeout", 503, True, "no reply before the call's deadline")
PEER_DEAD = _code("peer_dead", 503, True, "the peer stopped heartbeating during the call")
PEER_RESTARTED = _code("peer_restarted", 503, True, "the peer restarted during the call")
UPSTREAM_FAILED = _code("upstream_failed", 500, False, "a call to another service failed")
REQUEST_TOO_LARGE = _code("request_too_large", 413, False, "a request larger than one message "
                          "on the bus carries (a huge prompt or stop string): send less")

# ---- a request refused by the scheduler or the tokenizer: the client's to mend
BAD_REQUEST = _code("bad_request", 400, False, "the request is malformed")
BAD_REQUEST_ID = _code("bad_request_id", 400, False, "request_id is empty or too long")
DUPLICATE_REQUEST = _code("duplicate_request_id", 400, False, "a request of that id is running")
EMPTY_PROMPT = _code("empty_prompt", 400, False, "the prompt has no tokens", "prompt")
BAD_TOKEN_IDS = _code("bad_token_ids", 400, False, "a prompt id is not in the vocabulary", "prompt")
PROMPT_TOO_LONG = _code("prompt_too_long", 400, False, "the prompt leaves no room in the context",
                        "messages")
BAD_MAX_TOKENS = _code("bad_max_tokens", 400, False, "max_tokens is out of range", "max_tokens")
UNKNOWN_PRIORITY = _code("unknown_priority", 400, False, "priority is not high, normal or low")
BAD_STOP_STRINGS = _code("bad_stop_strings", 400, False, "stop strings: too many or too long",
                         "stop")
BAD_DEADLINE = _code("bad_deadline", 400, False, "deadline_s is not a positive number of seconds")
BAD_SEED = _code("bad_seed", 400, False, "seed is not an integer", "seed")
BAD_SAMPLING = _code("bad_sampling", 400, False, "a sampling parameter is out of its range")
BAD_MESSAGES = _code("bad_messages", 400, False, "the chat cannot be rendered as given",
                     "messages")
TEMPLATE_ERROR = _code("template_error", 400, False, "the chat template failed on this chat",
                       "messages")
UNKNOWN_TEMPLATE = _code("unknown_template", 400, False, "no chat template of that name",
                         "messages")
NO_CHAT_TEMPLATE = _code("no_chat_template", 400, False, "the model has no chat template (a base "
                         "model): send plain text as a completion, or start it with a template "
                         "(--chat-template)", "messages")
TEXT_TOO_LONG = _code("text_too_long", 400, False, "a text over what one message carries",
                      "messages")
BAD_FORMAT = _code("bad_format", 400, False, "the structured-output format (a JSON schema, a "
                   "grammar) is not one we support, or does not compile", "response_format")
BAD_TOKEN_ID = _code("bad_token_id", 400, False, "a token id not in the vocabulary", "tokens")
BAD_EMBED_INPUT = _code("bad_embedding_input", 400, False, "an embedding input is empty, not "
                        "text or token ids, or longer than the context (without truncation)",
                        "input")
BAD_DIMENSIONS = _code("bad_dimensions", 400, False, "dimensions is more than the model's "
                       "embedding width", "dimensions")

# ---- the cluster cannot serve (now or for good)
QUEUE_FULL = _code("queue_full", 429, True, "the waiting queue is full: retry after the hint")
STARTING = _code("starting", 503, True, "the service is still starting")
LOADING = _code("loading", 503, True, "the service is still loading its model")
TOKENIZER_UNAVAILABLE = _code("tokenizer_unavailable", 503, True, "no tokenizer answered in time")
RANGE_FAILED = _code("range_failed", 503, False, "a layer range is held by no ready shard and its "
                     "health watcher gave the shard up")
SCHEDULER_STOPPED = _code("scheduler_stopped", 503, True, "the scheduler stopped before the "
                          "request finished")
UNSERVED = _code("unserved", 500, False, "the request's layers stayed unserved past the "
                 "scheduler's time budget (no shard for a range, or every batch failing)")
DEADLINE = _code("deadline", 504, False, "the request's own deadline passed")
GRAMMAR_FAILED = _code("grammar_failed", 500, False, "the request's grammar could not follow "
                       "its tokens (a token it did not allow was drawn)")
SAMPLING_FAILED = _code("sampling_failed", 500, False, "the last shard could not sample this "
                        "request's row (its parameters, history or logits)")

# ---- a batch in the shard pipeline (scheduler <-> shards)
STALE_ROUTE = _code("stale_route", 503, True, "a stage of the batch's route is gone or restarted: "
                    "plan again and re-prefill")
KV_MISSING = _code("kv_missing", 503, True, "a batch goes on from positions the shard never "
                   "wrote: re-prefill")
RANGE_MISMATCH = _code("range_mismatch", 503, True, "the shard holds other layers than the "
                       "batch expects")
BAD_BATCH = _code("bad_batch", 500, False, "the batch does not fit its own layout")
BAD_LOGITS = _code("bad_logits", 500, False, "the logits of a row cannot be sampled")
UNREACHABLE = _code("unreachable", 503, True, "the last shard cannot send its answer to the "
                    "scheduler")

# ---- placement (scheduler -> shards that offer memory)
PINNED = _code("pinned", 500, False, "the shard's range was pinned by --layers")
BAD_RANGE = _code("bad_range", 500, False, "a layer range past the model's layers")
SUPERSEDED = _code("superseded", 500, False, "a newer placement plan came meanwhile")
NOT_STAGED = _code("not_staged", 500, False, "the shard has not loaded that plan")

# ---- the health watcher
UNKNOWN_SERVICE = _code("unknown_service", 500, False, "the watcher does not watch that service")
NOT_RUNNING = _code("not_running", 500, False, "the service is not running")

# ---- the tokenizer's vocabulary pages
VOCAB_TOO_LARGE = _code("vocab_too_large", 500, False, "the vocabulary page asked for does not "
                        "fit one message: ask for fewer ids")
