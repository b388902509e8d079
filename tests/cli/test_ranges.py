import pytest

from services.scheduler.placement.policy import split_layers


def test_ranges_are_contiguous_and_cover_every_layer():
    for n in (1, 2, 3, 7, 30):
        r = split_layers(30, n)
        assert r[0][0] == 0 and r[-1][1] == 30 and len(r) == n
        assert all(a < b for a, b in r) and all(r[i][1] == r[i + 1][0] for i in range(n - 1))
        assert max(b - a for a, b in r) - min(b - a for a, b in r) <= 1


def test_more_shards_than_layers_is_refused():
    with pytest.raises(ValueError, match="cannot cut"):
        split_layers(2, 3)
    with pytest.raises(ValueError):
        split_layers(30, 0)


def test_the_last_range_gives_up_layers_for_the_output_head():
    assert split_layers(30, 3, head_cost=8.0) == [(0, 13), (13, 25), (25, 30)]
    assert split_layers(30, 1, head_cost=8.0) == [(0, 30)]
    # However large the head, every shard keeps at least one layer.
    assert split_layers(4, 4, head_cost=100.0) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    for n in (2, 3, 5):
        r = split_layers(30, n, head_cost=8.0)
        work = [b - a for a, b in r]
        work[-1] += 8.0
        assert max(work) - min(work) <= 2, r


def test_head_cost_of_the_default_model_is_about_eight_layers(model_path):
    from services.scheduler.placement.policy import head_cost_in_layers
    from services.modelstore.gguf_meta import read_metadata
    assert 7.5 < head_cost_in_layers(read_metadata(model_path)) < 8.5
