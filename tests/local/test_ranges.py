import pytest

from services.local.ranges import split_layers


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
