"""Running pipelines: chains of shard processes, a driver per pipeline sending micro-batches and
taking their results, replicas and their circuit breakers, hop timings."""
