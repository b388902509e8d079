"""Check chat messages before a template sees them, and flatten OpenAI-style content parts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from services.tokenizer.errors import BadMessages

ROLES = ("system", "user", "assistant", "tool")


def normalize_messages(messages: Any) -> list[dict[str, Any]]:
    """Copies of the messages with `content` always a string; BadMessages names what is wrong."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise BadMessages(f"expected a list of messages, got {type(messages).__name__}")
    if not messages:
        raise BadMessages("the list is empty; a chat needs at least one message")
    return [_normalize(m, i) for i, m in enumerate(messages)]


def _normalize(message: Any, index: int) -> dict[str, Any]:
    if not isinstance(message, Mapping):
        raise BadMessages(f"expected an object with role and content, got {type(message).__name__}",
                          index)
    role = message.get("role")
    if role not in ROLES:
        raise BadMessages(f"unknown role {role!r}; expected one of {', '.join(ROLES)}", index)
    out = dict(message)
    out["content"] = _content_text(message.get("content"), message, index)
    return out


def _content_text(content: Any, message: Mapping, index: int) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        # OpenAI sends content: null on an assistant turn that only calls tools.
        if message.get("role") == "assistant" and message.get("tool_calls"):
            return ""
        raise BadMessages("content is missing", index)
    if isinstance(content, Sequence) and not isinstance(content, (str, bytes)):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise BadMessages(f"content[{j}] is of type {kind!r}; only text parts are supported",
                                  index)
            if not isinstance(part.get("text"), str):
                raise BadMessages(f"content[{j}].text must be a string", index)
            texts.append(part["text"])
        # Parts are joined with a newline, as llama.cpp's server and vLLM do.
        return "\n".join(texts)
    raise BadMessages(f"content must be a string or a list of text parts, "
                      f"got {type(content).__name__}", index)
