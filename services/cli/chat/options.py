"""How every answer of a chat is sampled and bounded. Imports nothing heavy: `llmbus --help`
builds the chat parser from these defaults."""

from __future__ import annotations

from dataclasses import dataclass

# llama.cpp's sampling defaults: what people who use local chat tools are used to.
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_P = 0.95
DEFAULT_TOP_K = 40
DEFAULT_MIN_P = 0.05
# An answer ends here unless the model stops first: a small model that loops in a way the
# scheduler's loop rules miss still ends in bounded time (about 20-60 s on a laptop's CPU).
DEFAULT_MAX_TOKENS = 1024

HELP = ("/reset clears the conversation, /exit (or Ctrl-D) quits, "
        "Ctrl-C stops an answer (at the prompt: quits)")


@dataclass(frozen=True)
class ChatOptions:
    """Checked by the scheduler, not here: it names a bad value with a typed error."""

    system: str | None = None         # None: no system message, the template's default applies
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    top_k: int = DEFAULT_TOP_K
    min_p: float = DEFAULT_MIN_P
    max_tokens: int | None = DEFAULT_MAX_TOKENS   # None: until the model stops or the context is full
    seed: int | None = None           # None: the scheduler picks one per answer
