"""`llmbus chat`: talk to the stack that `llmbus up` runs on this machine.

With no question: a terminal chat that keeps the conversation (each turn sends the whole
history as chat messages; the scheduler's prefix cache makes that cheap). With a question:
one answer streamed to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys

from .options import (DEFAULT_MAX_TOKENS, DEFAULT_MIN_P, DEFAULT_TEMPERATURE, DEFAULT_TOP_K,
                      DEFAULT_TOP_P, HELP, ChatOptions)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "chat", help="chat with the stack running here (`llmbus up`)",
        description=f"Chat with a running llmbus stack. Interactive: {HELP}. Sampling "
                    f"defaults are llama.cpp's.")
    p.add_argument("question", nargs="?", default=None,
                   help="ask this once, print the answer and exit (default: interactive chat)")
    p.add_argument("--cluster", default=None,
                   help="the stack of this cluster: running here, else its scheduler found on the network "
                        "by mDNS (default: the newest stack running here)")
    p.add_argument("--scheduler", metavar="HOST:PORT", default=None,
                   help="talk to the scheduler at this address instead of a local stack")
    p.add_argument("--system", default=None,
                   help="system message sent first (default: none, the chat template's applies)")
    p.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                   help="sampling temperature; 0 is greedy (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=DEFAULT_TOP_P,
                   help="nucleus sampling; 1 is off (default: %(default)s)")
    p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K,
                   help="top-k sampling; 0 is off (default: %(default)s)")
    p.add_argument("--min-p", type=float, default=DEFAULT_MIN_P,
                   help="min-p sampling; 0 is off (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                   help="longest answer in tokens (default: %(default)s, or less where the "
                        "context is fuller)")
    from bus.cli_args import add_key_argument
    add_key_argument(p, dict(os.environ))
    p.add_argument("--insecure", action="store_true",
                   help="with --cluster and no key: trust whatever scheduler of that cluster "
                        "answers on the network (default: refused)")
    p.add_argument("--seed", type=int, default=None,
                   help="sampling seed: the same seed and question give the same answer "
                        "(default: a new one each answer)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from bus.cli_args import cluster_key

    from .conversation import Conversation
    from .terminal import Session, interactive, one_shot
    options = ChatOptions(system=args.system, temperature=args.temperature, top_p=args.top_p,
                          top_k=args.top_k, min_p=args.min_p, max_tokens=args.max_tokens,
                          seed=args.seed)
    try:
        key = cluster_key(args)
    except ValueError as e:
        print(f"llmbus chat: {e}", file=sys.stderr)
        return 2
    session = Session(Conversation(options), cluster=args.cluster, scheduler=args.scheduler,
                      out=sys.stdout, err=sys.stderr, key=key, insecure=args.insecure)
    try:
        try:
            if args.question is not None:
                return one_shot(session, args.question)
            return interactive(session)
        finally:
            session.close()
    except KeyboardInterrupt:   # outside an answer and the prompt: starting or closing
        return 130
    except BrokenPipeError:     # `llmbus chat "..." | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141
