"""The tokenizer service: one model's Tokenizer behind the `tokenizer.*` messages.

Bad input is answered with a typed `bus.error` (bad_messages, unknown_template, template_error,
no_chat_template (a chat for a base model),
bad_token_id, text_too_long, prompt_too_long, vocab_too_large) and the service keeps serving. Work on text runs
in one worker thread so that requests keep being read while a long prompt is tokenized.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import msgpack

import wire
from bus.config import ServiceConfig
from bus.errors import ServiceError
from bus.service import Service, handles
from services.tokenizer import errors
from services.tokenizer.templates import reads_tools
from services.tokenizer.tool_prompt import builtin_tool_chat, uses_tools
from wire.failures import (BAD_MESSAGES, BAD_REQUEST, BAD_TOKEN_ID, LOADING, NO_CHAT_TEMPLATE,
                           PROMPT_TOO_LONG, TEMPLATE_ERROR, TEXT_TOO_LONG, UNKNOWN_TEMPLATE,
                           VOCAB_TOO_LARGE)
from wire.limits import MAX_HEADER_BYTES
from wire.messages.info import TokenizerInfo
from wire.messages.tokenizer import (Decode, Encode, Ids, InfoRequest, Prompt, Render, Text,
                                     ModelInfo, VocabRequest, VocabTable)

# Half the largest message a request can arrive in: big enough for any real prompt, small
# enough that this typed error, not the frame decoder's, is what a caller meets first.
MAX_TEXT_BYTES = 1 << 19
# Room left in a reply header for the envelope around a vocabulary page.
_HEADER_ROOM = 4096

_CODES: dict[type, str] = {
    errors.BadMessages: BAD_MESSAGES,
    errors.UnknownTemplate: UNKNOWN_TEMPLATE,
    errors.TemplateError: TEMPLATE_ERROR,
    errors.TemplateOverLimit: TEMPLATE_ERROR,
    errors.BadTokenId: BAD_TOKEN_ID,
    errors.NoChatTemplate: NO_CHAT_TEMPLATE,
}


@dataclass(frozen=True)
class TokenizerConfig:
    model: Path
    max_text_bytes: int = MAX_TEXT_BYTES
    # The chat template: a name (the GGUF's or a built-in: chatml, gemma...) or a Jinja file's
    # path. None: the GGUF's own; a GGUF without one is a base model, which cannot chat.
    chat_template: str | None = None

    def __post_init__(self):
        if not 0 < self.max_text_bytes <= MAX_HEADER_BYTES:
            raise ValueError(f"max_text_bytes must be within 1..{MAX_HEADER_BYTES}")


def openai_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI's newer clients send role "developer" for what templates know as "system"."""
    return [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]


# GGUF "{arch}.pooling_type" (llama.cpp's llama_pooling_type) as the pooling embeddings use.
POOLING_TYPES = {1: "mean", 2: "cls", 3: "last"}


def pooling_of(meta: dict, arch: str) -> str:
    """The model's pooling type for embeddings: mean where the GGUF names none (a causal chat
    model) or one we do not pool by (none: per token; rank: a classifier's)."""
    return POOLING_TYPES.get(int(meta.get(f"{arch}.pooling_type", 1) or 1), "mean")


def _details(path: Path, meta: dict, arch: str) -> dict[str, str]:
    """What model listings show about the file (Ollama's /api/tags details)."""
    from gguf import LlamaFileType
    try:
        quant = LlamaFileType(int(meta["general.file_type"])).name.removeprefix("MOSTLY_")
    except (KeyError, ValueError, TypeError):
        quant = ""
    return {"architecture": arch, "size_label": str(meta.get("general.size_label", "")),
            "quantization": quant, "file_bytes": str(path.stat().st_size)}


class TokenizerService(Service):
    kind = "tokenizer"

    def __init__(self, config: ServiceConfig, tok: TokenizerConfig, ctx=None):
        super().__init__(config, ctx)
        self.tok_config = tok
        self.tokenizer = None
        self.model_id = ""
        self._info: ModelInfo | None = None
        self._tables: dict[bool, list[bytes]] = {}   # skip_special -> bytes of every id
        # One worker: the Tokenizer serializes its callers anyway, and a long encode must not
        # hold the event loop (heartbeats, other requests) while it runs.
        self._work = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")

    # ------------------------------------------------------------------ lifecycle
    async def on_start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._work, self._load)

    def _load(self) -> None:
        from services.modelstore.identity import model_identity
        from services.modelstore.gguf_meta import read_metadata
        from services.modelstore.pull import model_names
        from services.tokenizer.token_bytes import token_bytes_table
        from services.tokenizer.tokenizer import Tokenizer
        from services.tokenizer.vocab import vocab_from_metadata

        path = self.tok_config.model
        meta = read_metadata(path)    # once: the tokenizer and the context length both come from it
        tok = Tokenizer(vocab_from_metadata(meta))
        arch = meta.get("general.architecture", "")
        templates = tok.templates
        chosen = self.tok_config.chat_template
        if chosen in templates.names:
            templates.use(chosen)
        elif chosen is not None:      # a file (tokenizer/cli.py checked which it is)
            templates.use(source=Path(chosen).read_text())
        self.model_id = model_identity(path)
        self._tables = {True: tok.token_bytes, False: token_bytes_table(tok.vocab, special=True)}
        self._info = ModelInfo(
            model=self.model_id, vocab_size=tok.vocab_size, bos_id=tok.bos_id, eos_id=tok.eos_id,
            eot_ids=sorted(tok.eot_ids), special_ids=sorted(tok.special_ids),
            context_length=int(meta.get(f"{arch}.context_length", 0)),
            templates=[n for n in templates.names if n == templates.default_name]
            + [n for n in templates.names if n != templates.default_name],
            chat=templates.default_name is not None,
            name=str(meta.get("general.name") or path.stem), details=_details(path, meta, arch),
            pooling=pooling_of(meta, arch),
            embedding_length=int(meta.get(f"{arch}.embedding_length", 0) or 0),
            aliases=model_names(path, str(meta.get("general.name") or "")))
        self.tokenizer = tok

    async def on_stop(self) -> None:
        self._work.shutdown(wait=True)

    def info(self) -> TokenizerInfo:
        if self._info is None:
            return TokenizerInfo()
        return TokenizerInfo(model=self.model_id, vocab_size=self._info.vocab_size)

    # ------------------------------------------------------------------ handlers
    @handles(InfoRequest)
    async def get_info(self, msg: wire.Message) -> ModelInfo:
        self._ready()
        return self._info

    @handles(VocabRequest)
    async def vocab(self, msg: wire.Message) -> VocabTable:
        self._ready()
        req: VocabRequest = msg.body
        table = self._tables[req.skip_special]
        n = len(table)
        if req.start > n:
            raise ServiceError(BAD_TOKEN_ID, f"start {req.start} is past the vocabulary of {n}")
        end = n if req.count == 0 else min(n, req.start + req.count)
        page = table[req.start:end]
        size = sum(len(b) for b in page) + 5 * len(page)   # msgpack bin: at most 5 bytes a header
        if size > MAX_HEADER_BYTES - _HEADER_ROOM:
            fit = max(1, (MAX_HEADER_BYTES - _HEADER_ROOM) * len(page) // (2 * size))
            raise ServiceError(VOCAB_TOO_LARGE,
                               f"ids {req.start}..{end} take about {size} bytes, over the "
                               f"{MAX_HEADER_BYTES} one message carries; ask in pages with "
                               f"start and count (count={fit} fits)")
        return VocabTable(token_bytes=page, start=req.start)

    @handles(Encode)
    async def encode(self, msg: wire.Message) -> Ids:
        tok = self._ready()
        req: Encode = msg.body
        self._check_length(req.text, "text")
        ids = await self._run(tok.encode, req.text, req.parse_special,
                              add_special=req.add_special)
        self._check_reply(ids, "")
        return Ids(ids=ids)

    @handles(Render)
    async def render(self, msg: wire.Message) -> Prompt:
        self._ready()
        req: Render = msg.body
        text, ids = await self._run(self._prompt, openai_roles(req.messages),
                                    req.add_generation_prompt, req.template, req.tools,
                                    req.assistant_prefix)
        self._check_reply(ids, text)
        return Prompt(text=text, ids=ids)

    def _prompt(self, messages, add_generation_prompt: bool, template: str | None,
                tools: list[dict] | None = None, assistant_prefix: str = ""):
        tok = self.tokenizer
        if not isinstance(messages, list):
            raise errors.BadMessages(f"expected a list of messages, got {type(messages).__name__}")
        if tools is not None and not (isinstance(tools, list)
                                      and all(isinstance(t, dict) for t in tools)):
            raise errors.BadMessages("tools must be a list of objects")
        extra = {}
        if uses_tools(messages, tools):
            if reads_tools(tok.templates.source(template)):
                extra["tools"] = tools or None
            else:
                messages = builtin_tool_chat(messages, tools)
        parts = tok.render_parts(messages, add_generation_prompt, template, **extra)
        parts.append((assistant_prefix, False))
        text = "".join(t for t, _ in parts)
        self._check_length(text, "the rendered chat")
        # BOS decided on the text rendered once (a template that reads the clock could render
        # differently twice); a message's content is never read as special tokens.
        return text, tok.encode_parts(parts, add_bos=tok.adds_bos(text))

    @handles(Decode)
    async def decode(self, msg: wire.Message) -> Text:
        tok = self._ready()
        req: Decode = msg.body
        text = await self._run(tok.decode, req.ids, req.skip_special)
        if len(text) * 4 > MAX_HEADER_BYTES - _HEADER_ROOM:   # cheap bound first, as for input
            n = len(text.encode("utf-8", "surrogatepass"))
            if n > MAX_HEADER_BYTES - _HEADER_ROOM:
                raise ServiceError(TEXT_TOO_LONG, f"{len(req.ids)} ids decode to {n} bytes, more "
                                                    f"than one reply carries: decode fewer at once")
        return Text(text=text)

    # ------------------------------------------------------------------ helpers
    def _ready(self):
        if self.tokenizer is None:
            raise ServiceError(LOADING, f"{self.name} is still loading", retry_after=0.5)
        return self.tokenizer

    def _check_length(self, text: str, what: str) -> None:
        limit = self.tok_config.max_text_bytes
        # Cheap bound first: a str of n code points is at most 4n bytes of UTF-8.
        if len(text) * 4 <= limit:
            return
        n = len(text.encode("utf-8", "surrogatepass"))
        if n > limit:
            raise ServiceError(TEXT_TOO_LONG, f"{what} is {n} bytes of UTF-8, over the limit "
                                                f"of {limit}: send it in shorter pieces")

    @staticmethod
    def _check_reply(ids: list[int], text: str) -> None:
        # A text within max_text_bytes can still make more ids than one reply header carries
        # (" a" is 2 bytes of text and 3 of msgpack); a reply the caller cannot decode would
        # leave it waiting, so say so here.
        size = len(msgpack.packb(ids)) + len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_HEADER_BYTES - _HEADER_ROOM:
            raise ServiceError(PROMPT_TOO_LONG, f"the prompt is {len(ids)} tokens, more than one "
                                                  f"reply carries ({size} bytes of "
                                                  f"{MAX_HEADER_BYTES}): shorten it")

    async def _run(self, fn: Callable, *args, **kw):
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._work, lambda: fn(*args, **kw))
        except errors.TokenizerError as e:
            raise ServiceError(_CODES.get(type(e), BAD_REQUEST), str(e)) from None
