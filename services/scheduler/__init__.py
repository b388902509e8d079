"""The scheduler service: admits generation requests, batches them through the shard pipelines,
and streams each request's tokens back to its caller. Three parts, one sub-package each:

    batching/    the pure batching policy: admission, micro-batches under a token budget, KV
                 pages and the prefix cache, sequences, stop rules, prefill pacing
    pipelines/   running pipelines: which shards form them, a driver per pipeline that sends
                 micro-batches and takes their results, replicas, circuit breakers, hop timings
    placement/   which shard holds which layer range (pure), and the placer that applies it

`service.py` is the bus shell around them; `config.py` its settings (the command line of
`llmbus run scheduler` is derived from them in `cli.py`).
"""
