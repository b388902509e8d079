"""Asking a tokenizer on the bus for the model it serves: its info and the bytes of every token
id, in pages (one message holds at most 1 MiB). The scheduler decodes streams with the bytes; the
gateway reports logprobs with them."""

from __future__ import annotations

from bus.errors import BadReply
from bus.peers import Peers
from wire.messages.tokenizer import InfoRequest, ModelInfo, VocabRequest

VOCAB_PAGE = 16384


async def fetch_model(peers: Peers, tokenizer: str,
                      timeout: float = 30.0) -> tuple[ModelInfo, list[bytes]]:
    """`tokenizer`'s ModelInfo and the bytes of each token id (control tokens b""); BadReply
    when it sends fewer tokens than its vocabulary holds."""
    info: ModelInfo = await peers.call(tokenizer, InfoRequest(), timeout=timeout)
    table: list[bytes] = []
    while len(table) < info.vocab_size:
        page = await peers.call(tokenizer, VocabRequest(skip_special=True, start=len(table),
                                                        count=VOCAB_PAGE), timeout=timeout)
        if not page.token_bytes:
            raise BadReply(f"{tokenizer} sent {len(table)} of {info.vocab_size} tokens")
        table.extend(page.token_bytes)
    return info, table
