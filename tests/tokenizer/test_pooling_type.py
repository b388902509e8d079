"""The pooling type embeddings use, from the GGUF as llama.cpp numbers it (llama_pooling_type)."""

import pytest

from services.tokenizer.service import pooling_of


@pytest.mark.parametrize("meta, pooling", [
    ({}, "mean"),                                   # a causal chat model names none: mean
    ({"llama.pooling_type": 1}, "mean"), ({"llama.pooling_type": 2}, "cls"),
    ({"llama.pooling_type": 3}, "last"),
    ({"llama.pooling_type": 0}, "mean"),            # none (per token) and rank: not ours to pool by
    ({"llama.pooling_type": 4}, "mean"),
    ({"bert.pooling_type": 2}, "mean"),             # another architecture's key
])
def test_pooling_type_of_the_gguf(meta, pooling):
    assert pooling_of(meta, "llama") == pooling
