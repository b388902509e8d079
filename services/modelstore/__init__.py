"""Model files: fetching the default model into the user's cache, reading GGUF, weight caches."""
