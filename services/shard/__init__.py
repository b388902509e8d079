"""The shard runner's engine: a llama forward over layers [a, b) with a paged KV cache."""
