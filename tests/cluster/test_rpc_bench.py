"""The arithmetic of bench/rpc_compare.py: how llama.cpp's layers are cut over its hosts (checked
against llama.cpp's own assignment rule, as llama-model.cpp writes it), and how a level's decode
rate is read from the token times."""

from __future__ import annotations

import itertools

import pytest

from bench.hosts_llamacpp import check_assignment, layout
from bench.hosts_load import decode_rates
from bench.serve_workload import RequestTiming
from services.modelstore.footprint import Footprint


def footprint(n: int, layer: int = 100, first: int = 90, last: int = 130) -> Footprint:
    return Footprint(layer_bytes=(layer,) * n, first_bytes=first, last_bytes=last, kv_heads=8, head_dim=128)


def brute_force_best(fp: Footprint, hosts: int) -> list[int]:
    """The largest host's bytes over every contiguous cut, llama-server's host holding the ends."""
    n, best = fp.n_layers, None
    for cuts in itertools.combinations(range(1, n), hosts - 1):
        edges = (0, *cuts, n)
        held = [sum(fp.layer_bytes[a:b]) for a, b in zip(edges, edges[1:])]
        held[0] += fp.first_bytes + fp.last_bytes
        key = sorted(held, reverse=True)
        best = key if best is None or key < best else best
    return best


@pytest.mark.parametrize("n,hosts", [(8, 2), (8, 3), (32, 3), (33, 3), (20, 4)])
def test_llama_cpp_puts_each_layer_where_the_layout_says(n, hosts):
    fp = footprint(n)
    lay = layout(fp, hosts)
    assigned = check_assignment(fp, lay)
    want = [-1 if i < lay.ranges[1][0] else next(d for d, (a, b) in enumerate(lay.ranges[1:]) if a <= i < b)
            for i in range(n)]
    assert assigned == want
    assert sorted(lay.bytes, reverse=True) == brute_force_best(fp, hosts)


def test_one_host_keeps_everything_on_its_cpu():
    lay = layout(footprint(32), 1)
    assert lay.ngl == 0 and lay.ranges == ((0, 32),) and lay.bytes == (32 * 100 + 90 + 130,)


def timing(sent: float, times: list[float]) -> RequestTiming:
    t = RequestTiming(sent=sent)
    t.token_times = list(times)
    return t


def test_the_decode_rate_is_read_where_every_request_decodes():
    # Two requests: first tokens at 1.0 and 2.0, last at 6.0 and 7.0; between 2.0 and 6.0 the
    # first brings tokens at 3, 4, 5, 6 and the second at 3, 4.5, 6: 7 tokens in 4 s.
    a = timing(0.0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    b = timing(0.5, [2.0, 3.0, 4.5, 6.0, 7.0])
    got = decode_rates([a, b])
    assert got["decode_tok_s"] == pytest.approx(7 / 4) and got["window_s"] == pytest.approx(4.0)
    assert got["wall_tok_s"] == pytest.approx(11 / 7.0)
    assert got["ttft_s"] == [1.0, 1.5] and got["tokens"] == [6, 5]


def test_requests_that_never_decode_together_add_their_own_rates():
    a = timing(0.0, [1.0, 2.0, 3.0])          # 2 tokens in 2 s
    b = timing(3.0, [4.0, 4.5, 5.0])          # 2 tokens in 1 s
    assert decode_rates([a, b])["decode_tok_s"] == pytest.approx(1.0 + 2.0)


def test_a_failed_request_is_counted_not_timed():
    a = timing(0.0, [1.0, 2.0, 3.0])
    bad = timing(0.0, [])
    bad.error = "HTTP 503: unavailable"
    got = decode_rates([a, bad])
    assert got["errors"] == ["HTTP 503: unavailable"] and got["decode_tok_s"] == pytest.approx(1.0)
