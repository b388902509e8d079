"""Messages of the tokenizer service: one model's vocabulary, text <-> ids, chat prompts.

The scheduler asks once for `tokenizer.info` and `tokenizer.vocab` (it detokenizes streams
itself from the token bytes), then per request `tokenizer.render` or `tokenizer.encode`.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ..schema import message


@message("tokenizer.info")
class InfoRequest:
    pass


@message("tokenizer.info_reply")
class ModelInfo:
    """The served model as its tokenizer knows it: vocabulary, special ids, context, templates."""
    model: str              # services.modelstore.identity.model_identity of the GGUF
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    eot_ids: list[int]      # ids that end a turn (EOS, EOT, <|im_end|>...), sorted
    special_ids: list[int]  # control tokens, sorted
    context_length: int     # GGUF "{arch}.context_length", 0 if absent
    templates: list[str]    # chat templates by name, the default first (if there is one)
    name: str = ""          # what users call it: GGUF "general.name", or the file's stem
    # For model listings (Ollama's details): architecture, size_label, quantization, file_bytes.
    details: dict[str, str] = field(default_factory=dict)
    # Whether the model can chat: False for a base model (its GGUF has no chat template and
    # none was chosen), which answers chats with no_chat_template; completions it continues.
    chat: bool = True
    # How an embedding pools its tokens: GGUF "{arch}.pooling_type" as "mean", "cls" or "last";
    # "mean" where the GGUF names none (or one we do not pool by: none, rank).
    pooling: str = "mean"
    embedding_length: int = 0   # GGUF "{arch}.embedding_length": an embedding's width (0: unknown)
    # Every name requests may use for it (case and spaces aside): `name` first, the pull name,
    # the file's name and its stem.
    aliases: list[str] = field(default_factory=list)


@message("tokenizer.vocab")
class VocabRequest:
    """The bytes of every token id; `start`/`count` page it (count 0: to the end) for
    vocabularies whose table does not fit in one message."""
    skip_special: bool = True
    start: int = 0
    count: int = 0

    def check(self):
        if self.start < 0 or self.count < 0:
            raise ValueError("start and count must be >= 0")


@message("tokenizer.vocab_reply")
class VocabTable:
    token_bytes: list[bytes]   # bytes of ids start.. (control tokens b"" when skip_special)
    start: int = 0


@message("tokenizer.encode")
class Encode:
    text: str
    parse_special: bool = False   # read control tokens written in the text (<|im_start|>)
    add_special: bool = False     # add BOS/EOS as the GGUF asks


@message("tokenizer.ids")
class Ids:
    ids: list[int]


@message("tokenizer.render")
class Render:
    """An OpenAI-style chat (content a string or text parts; role developer = system).

    `tools` are OpenAI-style function definitions ({type: function, function: {name,
    description, parameters}}); assistant turns may carry `tool_calls` and `tool` turns
    results. A template that does not read `tools` gets the built-in tool prompt
    (services/tokenizer/tool_prompt.py). `assistant_prefix` is text the assistant's answer
    starts with, appended after the generation prompt (a forced tool call starts this way)."""
    messages: list[dict[str, Any]]
    add_generation_prompt: bool = True
    template: str | None = None   # a name from ModelInfo.templates; None: the default
    tools: list[dict[str, Any]] | None = None
    assistant_prefix: str = ""


@message("tokenizer.prompt")
class Prompt:
    text: str
    ids: list[int]


@message("tokenizer.decode")
class Decode:
    ids: list[int]
    skip_special: bool = True


@message("tokenizer.text")
class Text:
    text: str
