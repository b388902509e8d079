"""Structured output: the grammar a request's answer must follow, compiled once at admission
(`formats.py`), and a matcher per request that follows its tokens and gives the packed mask of
the tokens its next draw may take (`matcher.py`). The scheduler sees every token, so the matcher
lives here; the masks travel with the batch to the last shard, which applies them before it
samples (kernels/token_masks.py)."""
