"""The tokenizer of one model, built from its GGUF: encode, decode, token bytes, chat prompts.

Pure (no sockets): the bus service wraps one instance. Encoding runs in HF `tokenizers`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from services.tokenizer.bpe import SPECIAL_TYPES, build_tokenizer
from services.tokenizer import plain_text
from services.tokenizer.errors import BadTokenId, TokenizerError
from services.tokenizer.messages import normalize_messages
from services.tokenizer.pretokenize import pre_tokenizer_spec
from services.tokenizer.stream import IncrementalDecoder
from services.tokenizer.templates import ChatTemplates, render
from services.tokenizer.token_bytes import token_bytes_table
from services.tokenizer.vocab import TokenType, Vocab, load_vocab

# Token texts that end a turn; llama.cpp's list for its end-of-generation set.
_EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "_<EOT>", "<|end_of_text|>", "<｜end▁of▁sentence｜>", "<|return|>", "<|call|>",
})


class Tokenizer:
    """Encode/decode with a GGUF's own vocabulary, exactly as llama.cpp tokenizes it."""

    def __init__(self, vocab: Vocab):
        spec = pre_tokenizer_spec(vocab.pre) if vocab.model == "gpt2" else None
        self.vocab = vocab
        self._hf = build_tokenizer(vocab, spec)
        # parse_special is a flag on the HF object (encode_special_tokens), set per call; the
        # lock keeps concurrent callers from seeing each other's setting.
        self._lock = threading.Lock()
        self.special_ids: frozenset[int] = frozenset(
            i for i, k in enumerate(vocab.token_types) if k == TokenType.CONTROL)
        self._bytes_with_special = token_bytes_table(vocab, special=True)
        # What the HF tokenizer matches as special when asked to (bpe.SPECIAL_TYPES).
        self._special_texts = plain_text.SpecialTexts(
            t for t, k in zip(vocab.tokens, vocab.token_types) if k in SPECIAL_TYPES)
        # What llama.cpp's token_to_piece gives: control tokens read as b"".
        self.token_bytes: list[bytes] = [b"" if i in self.special_ids else b
                                         for i, b in enumerate(self._bytes_with_special)]
        if vocab.add_bos is not None:
            self.add_bos_default = vocab.add_bos
        else:  # llama.cpp's defaults when the GGUF does not say
            self.add_bos_default = spec.add_bos_default if spec else vocab.model == "llama"
        self.add_eos_default = vocab.add_eos
        self._strip_prefix_space = vocab.model == "llama" and vocab.add_space_prefix
        eog = {i for i in (vocab.eos_id, vocab.eot_id, vocab.eom_id) if i is not None}
        eog.update(i for i in self.special_ids if vocab.tokens[i] in _EOG_TEXTS)
        self._eot_ids = frozenset(eog)
        self.templates = ChatTemplates(vocab.chat_template, vocab.named_templates,
                                       frozenset(vocab.tokens[i] for i in self.special_ids))
        self.templates.check_limits()    # a hostile template fails the load, not each request

    @classmethod
    def from_gguf(cls, path: str | Path) -> "Tokenizer":
        """Read only the tokenizer metadata of the file (about 50 ms for a 49k vocabulary)."""
        return cls(load_vocab(path))

    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    @property
    def bos_id(self) -> int | None:
        return self.vocab.bos_id

    @property
    def eos_id(self) -> int | None:
        return self.vocab.eos_id

    @property
    def eot_ids(self) -> frozenset[int]:
        """Every id that ends a turn: EOS, EOT/EOM if declared, and known end-of-turn specials."""
        return self._eot_ids

    def encode(self, text: str, parse_special: bool = False, add_bos: bool = False,
               add_eos: bool = False, *, add_special: bool = False) -> list[int]:
        """Token ids of `text`.

        parse_special: match control tokens such as <|im_start|> written in the text (user-defined
        tokens always are). add_bos / add_eos: put BOS / EOS around the ids. add_special: do
        what the GGUF asks (llama.cpp's add_special), i.e. add_bos_default / add_eos_default.
        """
        if not isinstance(text, str):
            raise TokenizerError(f"text to encode must be a string, got {type(text).__name__}")
        with self._lock:
            self._hf.encode_special_tokens = not parse_special
            # encode_batch releases the GIL while it works (encode does not): a long text does
            # not stall the service's event loop and its heartbeats.
            ids = self._hf.encode_batch([text], add_special_tokens=False)[0].ids
        if add_bos or (add_special and self.add_bos_default):
            ids.insert(0, self._required(self.vocab.bos_id, "BOS"))
        if add_eos or (add_special and self.add_eos_default):
            ids.append(self._required(self.vocab.eos_id, "EOS"))
        return ids

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of `ids` (bytes joined, then UTF-8 with U+FFFD for invalid bytes).

        skip_special=False writes control tokens as their text ("<|im_end|>"); True drops them.
        A SentencePiece vocabulary's leading prefix space is removed, so decode(encode(t)) == t.
        """
        table = self.token_bytes if skip_special else self._bytes_with_special
        n = len(table)
        parts = []
        for i in ids:
            if not isinstance(i, int) or not 0 <= i < n:
                raise BadTokenId(i, n)
            parts.append(table[i])
        if self._strip_prefix_space:
            # Undo the space SentencePiece put before the text (llama.cpp strips it too).
            first = next((k for k, p in enumerate(parts) if p), None)
            if first is not None and parts[first].startswith(b" "):
                parts[first] = parts[first][1:]
        return b"".join(parts).decode("utf-8", errors="replace")

    def stream(self, skip_special: bool = True) -> IncrementalDecoder:
        """A decoder for one generated sequence: token ids in, complete UTF-8 text out."""
        return IncrementalDecoder(self.token_bytes if skip_special else self._bytes_with_special)

    def render_chat(self, messages: Sequence[Any], add_generation_prompt: bool = True,
                    template: str | None = None, **template_kwargs: Any) -> str:
        """The prompt text of a chat; template is a name from `templates.names` (None: default)."""
        return render(self.templates.source(template), messages,
                      add_generation_prompt=add_generation_prompt,
                      bos_token=self._text(self.vocab.bos_id), eos_token=self._text(self.vocab.eos_id),
                      **template_kwargs)

    def render_parts(self, messages: Sequence[Any], add_generation_prompt: bool = True,
                     template: str | None = None, **template_kwargs: Any) -> list[tuple[str, bool]]:
        """The prompt of a chat as (text, is_content) pieces: what a message's content put there
        is never read as special tokens, what the template wrote is (see plain_text). A chat
        whose contents hold no special token's text renders as one piece, as llama.cpp has it."""
        messages = normalize_messages(messages)
        if not self._holds_special([m["content"] for m in messages]):
            return [(self.render_chat(messages, add_generation_prompt, template,
                                      **template_kwargs), False)]
        markers = plain_text.Markers.new()
        text = self.render_chat(plain_text.mark(messages, markers), add_generation_prompt,
                                template, **template_kwargs)
        return plain_text.split(text, markers)

    def encode_parts(self, parts: Sequence[tuple[str, bool]], add_bos: bool = False) -> list[int]:
        """Ids of a prompt's pieces: special tokens parsed in the template's, not in contents'."""
        with self._lock:
            self._hf.encode_special_tokens = False
            written = iter(self._hf.encode_batch([t for t, plain in parts if not plain],
                                                 add_special_tokens=False))
            self._hf.encode_special_tokens = True
            contents = iter(self._hf.encode_batch([t for t, plain in parts if plain],
                                                  add_special_tokens=False))
        ids = [self._required(self.vocab.bos_id, "BOS")] if add_bos else []
        for _, plain in parts:
            ids += next(contents if plain else written).ids
        return ids

    def encode_chat(self, messages: Sequence[Any], add_generation_prompt: bool = True,
                    template: str | None = None, **template_kwargs: Any) -> list[int]:
        """Prompt ids of a chat: rendered, special tokens parsed in what the template wrote,
        BOS added only if the GGUF asks for it and the template did not already write it."""
        parts = self.render_parts(messages, add_generation_prompt, template, **template_kwargs)
        return self.encode_parts(parts, add_bos=self.adds_bos("".join(t for t, _ in parts)))

    def adds_bos(self, prompt: str) -> bool:
        """Whether a rendered prompt gets BOS put before it: the GGUF asks for it and the
        template did not write it."""
        bos = self._text(self.vocab.bos_id)
        return self.add_bos_default and not (bos and prompt.startswith(bos))

    def _holds_special(self, texts: list[str]) -> bool:
        """Whether any of `texts` holds the text of a special token."""
        return any(self._special_texts.found_in(t) for t in texts if t)

    def _text(self, token_id: int | None) -> str:
        return "" if token_id is None else self.vocab.tokens[token_id]

    def _required(self, token_id: int | None, what: str) -> int:
        if token_id is None:
            raise TokenizerError(f"this model's vocabulary has no {what} token")
        return token_id
