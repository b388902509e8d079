"""Placement: which shard holds which layer range (a pure policy), and the placer that applies it
to the shards on the bus."""
