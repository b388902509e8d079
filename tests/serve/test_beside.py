"""bench.beside reads bench.serve's own rows and summarizes interleaved rounds by their medians."""

from bench.beside import rows, summary
from bench.serve import engine_name, row
from bench.serve_workload import Summary


def _summary(c: int, tok_s: float, itl_ms: float, errors: int = 0) -> Summary:
    return Summary(concurrency=c, requests=2 * c, errors=errors, tokens=64 * c, seconds=1.0,
                   tokens_per_s=tok_s, ttft_p50=0.5, ttft_p99=0.7, itl_p50=itl_ms / 1e3,
                   itl_p99=0.05, mean_prompt=150, mean_completion=31.0, finishes={})


def _output(*stacks) -> str:
    """What bench.serve prints for stacks of (shards, C, tok/s, ITL ms[, errors]), with its
    comment and verdict lines around them."""
    lines = ["# serve bench: model m.gguf", "engine  C reqs err ..."]
    for shards, c, tok_s, itl, *err in stacks:
        lines.append(row(engine_name(shards), _summary(c, tok_s, itl, *err), "12 batches"))
    lines += ["pipeline cost (3-shard / 1-shard throughput): C=1: 1.54",
              "llmbus 1-shard C=1: ITL p50 31.5 ms vs engine step 25.0 ms: NOT MET"]
    return "\n".join(lines)


def test_rows_reads_every_stack_row_bench_serve_prints_and_nothing_else():
    got = rows(_output((1, 1, 36.5, 11.6), (3, 32, 114.2, 97.8, 2)))
    assert got == {("llmbus 1-shard", 1): (0, 36.5, 11.6), ("llmbus 3-shard", 32): (2, 114.2, 97.8)}


def test_summary_gives_each_sides_median_over_its_rounds_and_the_ratio():
    base = [rows(_output((1, 1, t, i))) for t, i in ((30.0, 12.0), (40.0, 10.0), (35.0, 20.0))]
    this = [rows(_output((1, 1, t, i))) for t, i in ((45.0, 9.0), (60.0, 8.0), (50.0, 30.0))]
    lines = summary({"base": base, "this": this})
    # medians: base 35.0 tok/s, 12.0 ms; this 50.0 tok/s, 9.0 ms
    assert lines[1].split() == ["llmbus", "1-shard", "1", "35.0", "50.0", "1.43",
                                "12.0ms", "9.0ms", "0.75", "0/0"]


def test_a_row_missing_from_one_run_is_left_out_and_named():
    base = [rows(_output((1, 1, 30.0, 12.0), (3, 1, 20.0, 20.0))), rows(_output((1, 1, 30.0, 12.0)))]
    this = [rows(_output((1, 1, 30.0, 12.0), (3, 1, 20.0, 20.0)))] * 2
    lines = summary({"base": base, "this": this})
    assert len(lines) == 3 and "('llmbus 3-shard', 1)" in lines[-1]
