"""`llmbus run scheduler`: options of the scheduler service (no numpy needed to parse them)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-id", default="",
                   help="model identity to serve (default: the first tokenizer's)")
    p.add_argument("--max-batch-tokens", type=int, default=512,
                   help="token budget of one micro-batch (decodes + prefill chunks)")
    p.add_argument("--max-batch-seqs", type=int, default=64)
    p.add_argument("--inflight", type=int, default=0,
                   help="micro-batches in the pipeline at once (0: stages + 1)")
    p.add_argument("--max-queue", type=int, default=256,
                   help="waiting requests; past it a request is refused with retry-after")
    p.add_argument("--context", type=int, default=0,
                   help="tokens per sequence (0: the model's, bounded by the KV pages)")
    p.add_argument("--refill-tokens", type=int, default=128, metavar="N",
                   help="tokens of sequences re-prefilled after a shard loss per micro-batch: "
                        "they come back oldest first beside the decodes of those already back")
    p.add_argument("--unserved-budget", type=float, default=300.0, metavar="SECONDS",
                   help="a request fails only when its layers have been unserved this long "
                        "(no shard for a layer range, or every batch failing)")
    p.add_argument("--pace-ms", type=float, default=120.0,
                   help="while any stream decodes (or a first token is on its way), prefill "
                        "chunks are cut to keep a batch's predicted compute near this (a decode "
                        "waits for the batches ahead)")
    p.add_argument("--no-direct-results", dest="direct_results", action="store_false",
                   help="take each batch's answer only back along the chain of shards, not "
                        "straight from the last shard as well (one message back per stage)")
    p.add_argument("--pace-max-wait", type=float, default=10.0, metavar="SECONDS",
                   help="no pacing once a request has waited this long for its first token")


def build(args: argparse.Namespace, config):
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from .service import SchedulerService, SchedulerServiceConfig
    return SchedulerService(config, SchedulerServiceConfig(
        model=args.model_id, max_batch_tokens=args.max_batch_tokens,
        max_batch_seqs=args.max_batch_seqs, max_inflight=args.inflight,
        max_queue=args.max_queue, context_length=args.context,
        unserved_budget_s=args.unserved_budget, max_refill_tokens=args.refill_tokens,
        pace_step_s=args.pace_ms / 1e3, pace_max_wait_s=args.pace_max_wait,
        direct_results=args.direct_results))
