"""The model the cluster serves, as the HTTP APIs name and describe it."""

from __future__ import annotations

from dataclasses import dataclass, field

from wire.messages.tokenizer import ModelInfo


@dataclass(frozen=True)
class ModelCard:
    id: str                     # what clients send as `model`: GGUF general.name or the file stem
    identity: str               # the bus's model identity (a hash of the file)
    created: int                # unix seconds the gateway first saw it
    context_length: int
    details: dict[str, str] = field(default_factory=dict)
    token_bytes: tuple[bytes, ...] = ()   # per id, for logprobs (control tokens: b"")
    chat: bool = True           # False: a base model (no chat template), completions only
    aliases: tuple[str, ...] = ()         # other names requests may use: pull name, file name, stem

    @classmethod
    def of(cls, info: ModelInfo, created: int, token_bytes: list[bytes]) -> "ModelCard":
        return cls(id=info.name or info.model, identity=info.model, created=created,
                   context_length=info.context_length, details=dict(info.details),
                   token_bytes=tuple(token_bytes), chat=info.chat,
                   aliases=tuple(a for a in info.aliases if a != (info.name or info.model)))

    def matches(self, requested: str | None) -> bool:
        """A request names this model: by its id, one of its aliases (case and spaces aside), or
        its identity (clients that must send a model may send any)."""
        if requested is None or requested == self.identity:
            return True
        return _folded(requested) in {_folded(n) for n in (self.id, *self.aliases)}

    @property
    def capabilities(self) -> list[str]:
        """What the model can be asked for, in Ollama's words (a base model: completion only)."""
        return ["completion", "chat", "tools"] if self.chat else ["completion"]

    def token(self, token_id: int) -> bytes:
        return self.token_bytes[token_id] if 0 <= token_id < len(self.token_bytes) else b""


def _folded(name: str) -> str:
    return "".join(name.split()).casefold()
