"""The API key check: constant-time, on headers only, so a request without the key is
refused before its body is read."""

from __future__ import annotations

import hmac
from pathlib import Path

from bus.curve import secret_file_problem

from .errors import Unauthorized

# Paths a load balancer or a person probes without a key, and the web page's files (the page
# asks for the key, and sends it with its API calls).
OPEN_PATHS = frozenset({"/", "/health"})
OPEN_PREFIXES = ("/ui/",)


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def load_key(key_file: Path | None, env: dict) -> str | None:
    """The key from --api-key-file, else LLMBUS_API_KEY; None: no authentication."""
    if key_file is not None:
        check_private(key_file)
        key = key_file.read_text().strip()
        if not key:
            raise ValueError(f"--api-key-file {key_file} is empty")
        return key
    return env.get("LLMBUS_API_KEY") or None


def check_private(path: Path) -> None:
    """ValueError unless `path` is a regular file only its owner can read (as the cluster's
    CURVE key file): a key others can read is no secret."""
    problem = secret_file_problem(path, "--api-key-file")
    if problem:
        raise ValueError(problem)


def presented_key(headers) -> str | None:
    """OpenAI and Anthropic 2.x send `Authorization: Bearer`, older Anthropic `x-api-key`."""
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return headers.get("x-api-key") or headers.get("api-key")


def check(expected: str | None, headers) -> None:
    if expected is None:
        return
    given = presented_key(headers)
    if given is None:
        raise Unauthorized("no API key: send it as `Authorization: Bearer KEY`")
    # compare_digest on bytes takes the same time whatever prefix matches.
    if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                               expected.encode("utf-8")):
        raise Unauthorized("the API key is not valid")
