"""Every message type of the system, one module per service family."""

from . import bus, health, placement, sampling, scheduler, shard, tokenizer  # noqa: F401
