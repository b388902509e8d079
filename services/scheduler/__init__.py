"""Scheduler policy: admission, priorities, continuous batching, KV pages, prefix cache, stop rules.

Pure (no sockets, no asyncio, no arrays); the service shell drives it:

    sched = Scheduler(SchedulerConfig(num_pages=..., eos_ids={2}))
    sched.submit(Request("r1", prompt_ids, max_tokens=256, stop=("\\n\\n",)))  # or QueueFull
    while (plan := sched.schedule()) is not None:     # up to max_inflight plans at once
        send(plan)                                    # every shard gets the same page tables
    ... when the last shard answers batch_id with token ids:
    outs = sched.complete(batch_id, {rid: Sample(tok, decoder[rid].feed(tok), logprob)})
    for o in outs: stream(o.request_id, o.text); if o.finish: close(o.request_id, o.finish)
"""

from .admission import Admission
from .batch_plan import BatchPlan, Output, Sample, SeqChunk
from .config import SchedulerConfig
from .errors import (BadCompletion, BadMaxTokens, BadRequest, BadRequestId, BadSeed,
                     BadStopStrings, BadTokenIds, ConfigError, DuplicateRequest, EmptyPrompt,
                     PromptTooLong, QueueFull, SchedulerError, UnknownBatch, UnknownPriority)
from .policy import Scheduler
from .sequence import PRIORITIES, Request
from .stop_rules import FINISH_REASONS, Finish, StopState

__all__ = ["Admission", "BadCompletion", "BadMaxTokens", "BadRequest", "BadRequestId", "BadSeed",
           "BadStopStrings", "BadTokenIds", "BatchPlan", "ConfigError", "DuplicateRequest",
           "EmptyPrompt", "FINISH_REASONS", "Finish", "Output", "PRIORITIES", "PromptTooLong",
           "QueueFull", "Request", "Sample", "Scheduler", "SchedulerConfig", "SchedulerError",
           "SeqChunk", "StopState", "UnknownBatch", "UnknownPriority"]
