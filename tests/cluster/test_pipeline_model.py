"""The pipeline model of bench/simulate.py, against arithmetic done by hand here."""

from __future__ import annotations

import pytest

from bench.pipeline_model import Costs, Link, Pipeline, at, even_stages

MS = 1e-3


def costs(layer=None, head=None, hop=0.0, step=0.0, d_model=1000) -> Costs:
    return Costs(layer_decode=layer or {1: 10 * MS, 8: 10 * MS}, layer_prefill={1: 10 * MS, 100: 100 * MS},
                 head=head or {1: 2 * MS, 8: 2 * MS}, hop_overhead=hop, step_overhead=step,
                 d_model=d_model, n_layers=8, codec_bytes=2.0, header_bytes=0)


def test_tables_are_read_straight_between_and_past_their_points():
    t = {1: 1.0, 3: 2.0, 7: 4.0}
    assert at(t, 1) == 1.0 and at(t, 2) == 1.5 and at(t, 5) == 3.0
    assert at(t, 9) == 5.0 and at(t, 0) == 0.5      # the end segments carried on
    assert at({4: 2.0}, 2) == 1.0                   # one point: proportional


def test_one_sequence_waits_for_every_stage_and_hop_in_turn():
    link = Link(rtt_s=2 * MS, bytes_per_s=1e6)     # a hop: 1 ms + 2000 bytes a row at 1 MB/s = 3 ms
    p = Pipeline(costs(hop=0.5 * MS, step=0.25 * MS), link, (3, 5))
    # 8 layers at 10 ms, the head 2 ms, 3 hops of 3 ms on the wire and 0.5 ms of software, the step.
    want = 80 * MS + 2 * MS + 3 * 3 * MS + 3 * 0.5 * MS + 0.25 * MS
    assert p.round_trip(1) == pytest.approx(want)
    assert p.decode_rate(1, inflight=4) == pytest.approx(1 / want)   # one sequence: one batch


def test_micro_batches_help_separate_hosts_only_where_a_batch_costs_more_than_a_row():
    flat = costs(head={1: 0.0, 8: 0.0})            # memory-bound: 10 ms a layer at 1 row or 8
    lan = Pipeline(flat, Link(0.0, 1e12), (2, 2, 2, 2))
    # One batch of 8 reads each stage's weights once per token, as few times as it goes:
    # 4 micro-batches of 2 add none (each stage reads them 4 times per round).
    assert lan.decode_rate(8, 1) == pytest.approx(8 / (80 * MS))
    assert lan.decode_rate(8, 4) == pytest.approx(8 / (4 * 20 * MS))
    assert lan.best_inflight(8)[0] == 1
    # Compute-bound (a layer 10 ms a row) on a WAN (5 hops of 50 ms): one batch of 8 takes 640
    # ms of stages plus 250 ms of hops a token; 8 micro-batches of 1 take 80 + 250 ms, with the
    # busiest stage 8 x 20 ms of it: 8 tokens per 330 ms.
    linear = costs(layer={1: 10 * MS, 8: 80 * MS}, head={1: 0.0, 8: 0.0})
    wan = Pipeline(linear, Link(0.100, 1e12), (2, 2, 2, 2))
    assert wan.decode_rate(8, 1) == pytest.approx(8 / (890 * MS))
    assert wan.decode_rate(8, 4) == pytest.approx(8 / (410 * MS))
    assert wan.best_inflight(8) == (8, pytest.approx(8 / (330 * MS)))


def test_hosts_sharing_one_cpu_add_their_stages_work():
    c = costs(layer={1: 10 * MS, 2: 10 * MS})
    shared = Pipeline(c, Link(0.0, 1e12), (4, 4), cpu_share=1.0)
    separate = Pipeline(c, Link(0.0, 1e12), (4, 4))
    # 2 micro-batches of 1: the stages' 40 and 42 ms cannot overlap on one CPU a stage fills.
    assert shared.decode_rate(2, 2) == pytest.approx(2 / (2 * 82 * MS))
    assert separate.decode_rate(2, 2) == pytest.approx(2 / max(82 * MS, 2 * 42 * MS))
    # A stage alone keeps 0.8 of the CPU busy: together they do 82 ms of it in 0.8 x 82 ms ...
    part = Pipeline(c, Link(0.0, 1e12), (4, 4), cpu_share=0.8)
    assert part.decode_rate(2, 2) == pytest.approx(2 / (2 * 0.8 * 82 * MS))
    # ... but no stage runs faster than alone: with 1 of 8 layers on the first, the second's
    # 72 ms bounds each of the 2 micro-batches (0.3 x 82 ms would be less).
    lopsided = Pipeline(c, Link(0.0, 1e12), (1, 7), cpu_share=0.3)
    assert lopsided.decode_rate(2, 2) == pytest.approx(2 / (2 * 72 * MS))


def test_the_first_token_is_one_prefill_through_every_stage():
    link = Link(rtt_s=2 * MS, bytes_per_s=1e6)
    p = Pipeline(costs(hop=0.5 * MS, step=0.25 * MS), link, (4, 4))
    # 100 tokens: 100 ms a layer; the head of one row; 3 hops of 1 ms + 200 kB at 1 MB/s and
    # their software; the step.
    want = 8 * 100 * MS + 2 * MS + 3 * (1 * MS + 0.2 + 0.5 * MS) + 0.25 * MS
    assert p.ttft(100) == pytest.approx(want)


def test_layers_are_cut_as_evenly_as_they_go():
    assert even_stages(32, 3) == (11, 11, 10)
    assert even_stages(80, 64) == (2,) * 16 + (1,) * 48
    assert even_stages(8, 64) == (1,) * 8                  # hosts without a layer are left out


def test_costs_round_trip_through_json():
    c = costs()
    d = {**c.__dict__, "layer_decode": {str(k): v for k, v in c.layer_decode.items()}}
    assert Costs.from_json(d) == c


TWO_SHARDS = [["shard-a-0", 0, 4], ["shard-b-0", 4, 8]]


def steps(a_ms, b_ms, decode_ms, decode_batches, batches_done, **more) -> dict:
    """A level's `scheduler` figures: each shard's compute, the decode steps' and the batches."""
    return {"driver.compute_ms.shard-a-0": a_ms, "driver.compute_ms.shard-b-0": b_ms,
            "driver.decode_compute_ms": decode_ms, "driver.decode_batches": decode_batches,
            "driver.batches_done": batches_done, **more}


def level(rate, scheduler, inflight=1.0, ttft=0.7, **more) -> dict:
    """One concurrency level of rpc_compare's JSON, a 100-token prompt."""
    return {"decode_tok_s": rate, "inflight": inflight, "ttft_s": [ttft], "prompt_tokens": [100],
            **more, "scheduler": scheduler}


def two_shard_run(one, eight, link, delay_ms=1.0) -> dict:
    return {"delay_ms": delay_ms, "link": link, "placement": TWO_SHARDS,
            "rounds": [{"llmbus@1": one, "llmbus@8": eight}]}


# c=1: 10 decode batches of 40 ms over both shards and one prefill of 100 ms.
ALONE = level(19.0, steps(250.0, 250.0, 400.0, 10.0, 11.0))


def test_a_run_is_predicted_from_the_compute_its_shards_reported():
    from bench.simulate import predictions
    link = {"rtt_s": 2 * MS, "bytes_per_s": 1e6}      # a hop: 1 ms + 2000 bytes a row at 1 MB/s
    # c=1: ALONE; c=8 in 2 micro-batches of 4 rows: 20 decode batches that the shards timed at
    # 80 ms, stretched by computing beside each other (the prediction takes the stages' compute
    # from c=1).
    eight = level(50.0, steps(800.0, 800.0, 1600.0, 20.0, 20.0), inflight=2.0, ttft=1.0)
    run = two_shard_run(ALONE, eight, link)
    # A layer: 10 ms at 1 row, 24 at 8 (16 at 4); a stage alone keeps 0.8 of the CPU busy.
    layer = {1: 10 * MS, 8: 24 * MS}
    got = {what: (measured, by_run) for what, measured, by_run, _ in
           predictions(costs(layer=layer, hop=0.5 * MS, step=0.25 * MS), run, cpu_share=0.8)}
    # c=1: 20 ms a stage and its 0.5 ms of software, the scheduler's end of the last hop, 3 hops
    # of 3 ms, the step.
    assert got["decode tok/s, c=1"] == (19.0, pytest.approx(1 / (41 * MS + 0.5 * MS + 9 * MS + 0.25 * MS)))
    # First token: the 100 ms prefill, 3 hops of 1 ms + 200 kB at 1 MB/s and their software, the step.
    assert got["first token s, c=1"] == (0.7, pytest.approx(0.1 + 3 * (0.201 + 0.5 * MS) + 0.25 * MS))
    # c=8: 2 micro-batches of 4 rows, each stage's 20 ms at 1 row grown 1.6x to 32 ms, and its
    # 0.5 ms of software; on one CPU the two stages' 65 ms for each micro-batch at 0.8 of it
    # (104 ms) are longer than a micro-batch's round trip (65 + 0.5 + 3 x 9 + 0.25 ms).
    assert got["decode tok/s, c=8"] == (50.0, pytest.approx(8 / (2 * 0.8 * 65 * MS)))


def test_a_level_decoding_in_one_micro_batch_is_predicted_from_its_own_step():
    from bench.simulate import predictions
    link = {"rtt_s": 2 * MS, "bytes_per_s": 1e6}
    # c=1: ALONE. c=8: 8 prompts prefilled apart, then 10 decode batches of all 8 rows (80
    # decoded tokens), which the shards timed at 150 ms: one batch in flight, so no stage
    # stretched another and the level's own step counts, not c=1's grown by the bench's table
    # (which would say 24/10 of 40 ms = 96 ms).
    eight = level(40.0, steps(1200.0, 1800.0, 1500.0, 10.0, 18.0), inflight=1.4, ttft=1.0,
                  tokens=[11] * 8, requests=8)
    run = two_shard_run(ALONE, eight, link)
    layer = {1: 10 * MS, 8: 24 * MS}
    got = {what: (measured, by_run) for what, measured, by_run, _ in
           predictions(costs(layer=layer, hop=0.5 * MS, step=0.25 * MS), run, cpu_share=0.8)}
    # The stages' shares of the level's compute (2 : 3) of its 150 ms step, 60 and 90 ms, each
    # with 0.5 ms of software, the scheduler's end of the last hop, 3 hops of 1 ms + 16 kB at
    # 1 MB/s, the step; one micro-batch, so the round trip is the cycle.
    hop = MS + 8 * 1000 * 2.0 / 1e6
    assert got["decode tok/s, c=8"] == (40.0, pytest.approx(8 / (150 * MS + 3 * 0.5 * MS + 3 * hop + 0.25 * MS)))


def test_steps_timed_by_rows_give_the_full_steps_not_the_mean_of_a_ragged_level():
    from bench.simulate import predictions
    link = {"rtt_s": 0.0, "bytes_per_s": 1e12}
    # c=8: 10 steps of all 8 rows at 60 + 90 ms, and 4 of 2 rows at 40 + 60 ms where the
    # requests ended apart (the mean step, 135.7 ms, is not a full one); c=1: 10 steps of 1 row.
    one = level(10.0, steps(300.0, 300.0, 400.0, 10.0, 11.0, **{
        "driver.decode_batches.1": 10.0, "driver.decode_compute_ms.1.shard-a-0": 150.0,
        "driver.decode_compute_ms.1.shard-b-0": 250.0}), tokens=[11], requests=1)
    eight = level(50.0, steps(1000.0, 1500.0, 1900.0, 14.0, 22.0, **{
        "driver.decode_batches.8": 10.0, "driver.decode_batches.2": 4.0,
        "driver.decode_compute_ms.8.shard-a-0": 600.0, "driver.decode_compute_ms.8.shard-b-0": 900.0,
        "driver.decode_compute_ms.2.shard-a-0": 160.0, "driver.decode_compute_ms.2.shard-b-0": 240.0}),
        inflight=1.4, ttft=1.0, tokens=[12] * 4 + [10] * 4, requests=8)
    run = two_shard_run(one, eight, link, delay_ms=0.0)
    got = {what: by_run for what, _, by_run, _ in predictions(costs(), run)}
    assert got["decode tok/s, c=8"] == pytest.approx(8 / (150 * MS))
    assert got["decode tok/s, c=1"] == pytest.approx(1 / (40 * MS))       # 15 + 25 ms, not the mean's split


def test_the_benchs_first_token_leaves_out_what_the_prefix_cache_served():
    from bench.simulate import predictions
    # A round that asks again the prompt of the round before: 60 of its 100 tokens come from
    # the prefix cache, so the prefill computes 40 (8 layers of 10 ms a token at this table's
    # slope: 10 ms at 1 token, 100 at 100) and the bench's first token is that prefill's.
    def level(hit):
        s = {"driver.compute_ms.shard-a-0": 100.0, "driver.decode_compute_ms": 40.0,
             "driver.decode_batches": 1.0, "driver.batches_done": 2.0}
        if hit is not None:
            s["prefix_hit_tokens"] = float(hit)
        return {"decode_tok_s": 10.0, "inflight": 1.0, "ttft_s": [0.5], "prompt_tokens": [100], "scheduler": s}
    c = costs()
    link = {"rtt_s": 0.0, "bytes_per_s": 1e12}

    def bench_ttft(hit):
        run = {"delay_ms": 0.0, "link": link, "placement": [["shard-a-0", 0, 8]],
               "rounds": [{"llmbus@1": level(hit)}]}
        return {what: by_bench for what, _, _, by_bench in predictions(c, run)}["first token s, c=1"]

    p = Pipeline(c, Link(0.0, 1e12), (8,))
    assert bench_ttft(60) == pytest.approx(p.ttft(40)) and p.ttft(40) < p.ttft(100)
    assert bench_ttft(None) == pytest.approx(p.ttft(100))     # a run that did not record hits
