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

    @classmethod
    def of(cls, info: ModelInfo, created: int, token_bytes: list[bytes]) -> "ModelCard":
        return cls(id=info.name or info.model, identity=info.model, created=created,
                   context_length=info.context_length, details=dict(info.details),
                   token_bytes=tuple(token_bytes), chat=info.chat)

    def matches(self, requested: str | None) -> bool:
        """A request names this model (clients that must send one may send its id or identity)."""
        return requested is None or requested in (self.id, self.identity)

    @property
    def capabilities(self) -> list[str]:
        """What the model can be asked for, in Ollama's words (a base model: completion only)."""
        return ["completion", "chat", "tools"] if self.chat else ["completion"]

    def token(self, token_id: int) -> bytes:
        return self.token_bytes[token_id] if 0 <= token_id < len(self.token_bytes) else b""
