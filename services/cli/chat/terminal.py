"""The terminal side of `llmbus chat`: the prompt, streaming an answer, Ctrl-C, one-shot runs.

One event loop lives for the whole session and runs only while an answer streams, so that
`input()` (and readline's line editing) owns the terminal at the prompt. While an answer
streams, Ctrl-C cancels it and waits until the scheduler has dropped the request.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TextIO

from bus.curve import ClusterKey, read_key_file
from services.cli.stacks import running

from .client import Answer, ChatClient
from .conversation import Conversation, parse_line
from .discover import discover
from .errors import ChatError, NoStack
from .options import HELP
from .target import Target, pick

OK, FAILED, STOPPED = "ok", "failed", "stopped"


class Session:
    """The event loop, the bus context and the stack in use, for the life of one `llmbus chat`."""

    def __init__(self, conversation: Conversation, cluster: str | None = None,
                 scheduler: str | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
                 key: ClusterKey | None = None, insecure: bool = False):
        import zmq.asyncio
        self.conv = conversation
        self.cluster, self.scheduler = cluster, scheduler
        # Where mDNS looks for a cluster's scheduler on the network: every interface unless told.
        self.interfaces = tuple(i for i in os.environ.get("LLMBUS_MDNS_INTERFACES", "").split(",") if i)
        self.out, self.err = out, err
        self.loop = asyncio.new_event_loop()
        self.ctx = zmq.asyncio.Context()
        self.key = key
        self.insecure = insecure     # trust a scheduler found without a key (never by default)
        self.client = ChatClient(self.ctx, key)
        self.target: Target | None = None

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.ctx.destroy(linger=0)
        self.loop.close()

    def say(self, line: str) -> None:
        print(line, file=self.err, flush=True)

    def find(self) -> Target:
        """The stack to ask now: found again each turn, so a restarted `llmbus up` is picked up."""
        try:
            target = pick(running(), self.cluster, self.scheduler)
        except NoStack:
            if self.cluster is None:
                raise
            # No stack of that cluster here: its scheduler may run on another machine. Found
            # by mDNS, only a key proves it is the cluster's: without one, anyone may answer.
            if self.key is None and not self.insecure:
                raise NoStack(f"no llmbus stack of cluster {self.cluster!r} runs on this machine; "
                              f"one on the network is trusted only with the cluster's key: give "
                              f"--key-file (or LLMBUS_KEY_FILE), --scheduler HOST:PORT of the one "
                              f"you trust, or --insecure to take whatever scheduler answers "
                              f"(LLMBUS_MDNS_INTERFACES limits where it looks)")
            target = self.loop.run_until_complete(discover(self.ctx, self.cluster, self.interfaces,
                                                               key=self.key))
        if self.key is None:
            # A stack that `llmbus up --key-file` started here says which file it uses.
            self.client.key = read_key_file(Path(target.key_file)) if target.key_file else None
        if self.target is not None and target.scheduler != self.target.scheduler:
            self.say(f"[now talking to {target.describe()}]")
        self.target = target
        return target

    def ask(self, question: str) -> str:
        """Stream one answer to stdout; OK, FAILED (said on stderr) or STOPPED (Ctrl-C)."""
        try:
            target = self.find()
        except (ChatError, ValueError) as e:
            self.say(f"llmbus chat: {e}")
            return FAILED
        request = self.conv.request(question)
        shown: list[str] = []

        def show(text: str) -> None:
            shown.append(text)
            self.out.write(text)
            self.out.flush()

        task = self.loop.create_task(self.client.ask(target, request, show))
        stopped = False

        def on_sigint() -> None:
            nonlocal stopped
            stopped = True
            task.cancel()

        self.loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            answer = self.loop.run_until_complete(task)
        except asyncio.CancelledError:
            if not stopped:
                raise
            # Leaving the stream already tells the scheduler; this waits until it is done.
            self.loop.run_until_complete(self.client.cancel(request.request_id))
            self._end_line(shown)
            self.say("[stopped]")
            self.conv.answered(question, "".join(shown))
            return STOPPED
        except ChatError as e:
            self._end_line(shown)
            self.say(f"llmbus chat: {e}")
            return FAILED
        finally:
            self.loop.remove_signal_handler(signal.SIGINT)
        self._end_line(shown)
        self.conv.answered(question, answer.text)
        return self._finish(answer)

    def _finish(self, answer: Answer) -> str:
        if answer.finish_reason == "length":
            if self.conv.options.max_tokens is not None and not answer.note:
                self.say(f"[stopped at --max-tokens {answer.max_tokens}]")
            else:
                self.say(f"[the context is full{': ' + answer.note if answer.note else ''}; "
                         f"/reset starts over]")
        elif answer.finish_reason == "repeated_line_loop":
            self.say("[stopped: the answer kept repeating a line]")
        elif answer.finish_reason == "repeated_phrase_loop":
            self.say("[stopped: the answer kept repeating a phrase]")
        elif answer.finish_reason == "cancelled":
            self.say("llmbus chat: the request was cancelled on the scheduler")
            return FAILED
        return OK

    def _end_line(self, shown: list[str]) -> None:
        if shown and not "".join(shown).endswith("\n"):
            self.out.write("\n")
        self.out.flush()


def one_shot(session: Session, question: str) -> int:
    """`llmbus chat "QUESTION"`: 0 when answered, 1 on an error, 130 when stopped with Ctrl-C."""
    outcome = session.ask(question)
    return {OK: 0, FAILED: 1, STOPPED: 130}[outcome]


def interactive(session: Session) -> int:
    """The prompt loop; returns the exit status (0 at /exit, Ctrl-D or Ctrl-C at the prompt)."""
    try:
        target = session.find()
    except (ChatError, ValueError) as e:
        session.say(f"llmbus chat: {e}")
        return 1
    _line_editing()
    session.say(f"llmbus chat with {target.describe()}. {HELP}.")
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            session.out.write("\n")
            return 0
        cmd = parse_line(line)
        if cmd.kind == "exit":
            return 0
        if cmd.kind == "reset":
            session.conv.reset()
            session.say("[conversation cleared]")
        elif cmd.kind == "help":
            session.say(HELP)
        elif cmd.kind == "unknown":
            session.say(f"unknown command {cmd.text}: {HELP}")
        elif cmd.kind == "ask":
            session.ask(cmd.text)
            session.out.write("\n")


def _line_editing() -> None:
    # Importing readline is what makes input() edit lines and recall history.
    if sys.stdin.isatty():
        try:
            import readline  # noqa: F401
        except ImportError:
            pass

