"""The batching policy: admission, priorities, continuous batching, KV pages, prefix cache, stop rules.

Pure (no sockets, no asyncio, no arrays): the service shell owns the I/O and drives it.

    sched = Scheduler(SchedulerConfig(num_pages=4096, page_size=16, eos_ids={2},
                                      token_bytes=vocabulary_bytes))
    terms = sched.submit(Request("r1", prompt_ids, max_tokens=256, priority="normal",
                                 stop=("</answer>",), seed=7))
    # raises a BadRequest subclass (reply 400) or QueueFull(retry_after) (reply 429/503)
    while (batch := sched.schedule()) is not None:  # at most max_inflight micro-batches in flight
        send_to_first_shard(batch)                   # every shard gets the same page tables
    # when the last shard returns token ids for batch.batch_id:
    outs = sched.complete(batch_id, {rid: SampledToken(tok, logprob)},
                          failures={rid2: "bad_logits: ..."})   # rows the last shard could not sample
    for o in outs:                                   # o.text: stream it; o.finish: close stream
        ...
    # then schedule() again. Client went away: sched.cancel(rid). A shard restarted:
    # sched.reset_for_recovery() (every sequence re-prefills; none fails for it). The pipeline
    # gone past the driver's time budget: sched.fail_all(reason, code). Replica pipelines have a
    # policy each; one whose pipeline is lost hands its sequences over: for seq in
    # sched.evacuate(): other.adopt(seq) (re-prefilled there from prompt + generated tokens).
"""

from .admission import Admission, check_sampling
from .batches import MicroBatch, Output, SampledToken, SeqChunk
from .config import SchedulerConfig
from .errors import (BadCompletion, BadMaxTokens, BadRequest, BadRequestId, BadSampling, BadSeed,
                     BadStopStrings, BadTokenIds, ConfigError, DuplicateRequest, EmptyPrompt,
                     PromptTooLong, QueueFull, SchedulerError, UnknownBatch, UnknownPriority)
from .policy import Scheduler
from .sequence import PRIORITIES, Request
from .client_text import ClientText
from .stop_rules import FINISH_REASONS, Finish, StopState

__all__ = ["Admission", "BadCompletion", "BadMaxTokens", "BadRequest", "BadRequestId",
           "BadSampling", "BadSeed", "BadStopStrings", "BadTokenIds", "MicroBatch", "ClientText",
           "ConfigError", "DuplicateRequest", "EmptyPrompt", "FINISH_REASONS", "Finish", "Output",
           "PRIORITIES", "PromptTooLong", "QueueFull", "Request", "SampledToken", "Scheduler",
           "SchedulerConfig", "SchedulerError", "SeqChunk", "StopState", "UnknownBatch",
           "UnknownPriority", "check_sampling"]
