"""Typed errors of the tokenizer, named for what the caller did or must do."""

from services.modelstore.errors import BadModelFile  # noqa: F401  (raised by vocab.py, bpe.py too)


class TokenizerError(ValueError):
    """Base of every error this package raises on bad input or a bad model file."""


class UnsupportedTokenizer(TokenizerError):
    """The GGUF names a tokenizer model or pre-tokenizer this service cannot build."""

    def __init__(self, kind: str, name: str, supported: list[str]):
        super().__init__(f"unsupported {kind} {name!r}; supported: {', '.join(sorted(supported))}")
        self.kind = kind
        self.name = name
        self.supported = sorted(supported)


class BadTokenId(TokenizerError):
    """A token id outside [0, vocab_size)."""

    def __init__(self, token_id: object, vocab_size: int):
        super().__init__(f"token id {token_id!r} is not in [0, {vocab_size})")
        self.token_id = token_id
        self.vocab_size = vocab_size


class BadMessages(TokenizerError):
    """Chat messages the template cannot take: empty list, unknown role, non-text content."""

    def __init__(self, detail: str, index: int | None = None):
        where = f"messages[{index}]: " if index is not None else "messages: "
        super().__init__(where + detail)
        self.index = index
        self.detail = detail


class UnknownTemplate(TokenizerError):
    """A chat template asked for by a name that neither the GGUF nor the built-ins have."""

    def __init__(self, name: str, available: list[str]):
        super().__init__(f"no chat template named {name!r}; available: {', '.join(available)}")
        self.name = name
        self.available = available


class NoChatTemplate(TokenizerError):
    """A chat for a model whose GGUF has no chat template and that was given none: a base
    model, which continues text rather than answering turns."""

    def __init__(self, suggested: str | None = None):
        hint = (f" (its vocabulary has the {suggested!r} template's turn markers: "
                f"--chat-template {suggested})" if suggested else "")
        super().__init__(
            "this model has no chat template (a base model: it continues text, it does not "
            "answer chats): send plain text to /v1/completions (Ollama: /api/generate), or start "
            f"it with --chat-template NAME|FILE{hint}")
        self.suggested = suggested


class TemplateError(TokenizerError):
    """The chat template failed to render (a Jinja error or the template's raise_exception)."""


class TemplateOverLimit(TemplateError):
    """The chat template ran past its time or output limit: a hostile (or broken) template. At
    load this fails the model, naming the template and the limit."""
