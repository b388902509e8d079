"""What a chat remembers and what it asks for: the history, the request, the slash commands.

Pure: no sockets, no terminal. The history holds only what the screen shows, so that the
model is asked about the same conversation the user sees.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from wire.messages.scheduler import Generate

from .options import ChatOptions


@dataclass
class Conversation:
    options: ChatOptions = field(default_factory=ChatOptions)
    turns: list[dict[str, str]] = field(default_factory=list)

    def messages(self, question: str) -> list[dict[str, str]]:
        """What to send for `question`: the system message, the turns so far, the question."""
        system = ([{"role": "system", "content": self.options.system}]
                  if self.options.system is not None else [])
        return [*system, *self.turns, {"role": "user", "content": question}]

    def request(self, question: str) -> Generate:
        """The scheduler request for `question`, named here so that it can be cancelled by id."""
        o = self.options
        return Generate(messages=self.messages(question), temperature=o.temperature,
                        top_p=o.top_p, top_k=o.top_k, min_p=o.min_p, max_tokens=o.max_tokens,
                        seed=o.seed, request_id=f"chat-{uuid.uuid4().hex}")

    def answered(self, question: str, answer: str) -> None:
        """Keep a turn the user saw (an answer stopped with Ctrl-C included, as far as it got)."""
        self.turns += [{"role": "user", "content": question},
                       {"role": "assistant", "content": answer}]

    def reset(self) -> None:
        self.turns.clear()


@dataclass(frozen=True)
class Command:
    """A line typed at the prompt: a question, or one of the slash commands."""

    kind: str           # "ask", "reset", "exit", "help", "empty", "unknown"
    text: str = ""


_COMMANDS = {"/reset": "reset", "/clear": "reset", "/exit": "exit", "/quit": "exit",
             "/bye": "exit", "/help": "help", "/?": "help"}


def parse_line(line: str) -> Command:
    text = line.strip()
    if not text:
        return Command("empty")
    if text.startswith("/"):
        word = text.split()[0].lower()
        return Command(_COMMANDS.get(word, "unknown"), word)
    return Command("ask", text)
