"""Typed errors of reading model files."""


class BadModelFile(ValueError):
    """The file is not a GGUF we can read, or fields we need are missing or inconsistent."""
