"""The weight cache stays within its budget: which entries go (pure), and pruning a real folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.modelstore.cache_budget import (ABANDONED_AFTER_S, CacheEntry, budget_bytes,
                                              to_remove)
from services.modelstore.weight_cache import LAYOUT_VERSION, prune

GB = 2**30
NOW = 1_000_000.0


def e(name: str, gb: float, used: float, layout: int | None = 3) -> CacheEntry:
    return CacheEntry(Path(name), int(gb * GB), used, layout)


def test_least_recently_used_go_first_until_the_rest_fits():
    entries = [e("a", 4, 10), e("b", 4, 30), e("c", 4, 20), e("d", 1, 40)]
    assert to_remove(entries, 9 * GB, 3, keep=Path("d"), now=NOW) == [Path("a")]
    assert to_remove(entries, 5 * GB, 3, keep=Path("d"), now=NOW) == [Path("a"), Path("c")]
    assert to_remove(entries, 13 * GB, 3, keep=Path("d"), now=NOW) == []


def test_the_entry_just_loaded_stays_even_alone_over_budget():
    entries = [e("old", 1, 10), e("big", 20, 5)]
    assert to_remove(entries, 8 * GB, 3, keep=Path("big"), now=NOW) == [Path("old")]


def test_other_layouts_go_whatever_the_budget_and_fresh_temporaries_stay():
    entries = [e("v2", 0.1, 50, layout=2), e("v3", 0.1, 10), e(".tmp-new", 0.1, NOW - 60, None),
               e(".tmp-dead", 0.1, NOW - ABANDONED_AFTER_S - 1, None)]
    assert sorted(to_remove(entries, 100 * GB, 3, keep=Path("v3"), now=NOW)) == \
        [Path(".tmp-dead"), Path("v2")]


def test_the_budget_comes_from_the_environment_with_a_clear_error():
    assert budget_bytes({}) == 10 * GB
    assert budget_bytes({"LLMBUS_WEIGHT_CACHE_GB": "0.5"}) == GB // 2
    for bad in ("lots", "0", "-1", "nan"):
        with pytest.raises(ValueError, match="LLMBUS_WEIGHT_CACHE_GB"):
            budget_bytes({"LLMBUS_WEIGHT_CACHE_GB": bad})


def entry(root: Path, ident: str, name: str, nbytes: int, used: float) -> Path:
    d = root / ident / name
    d.mkdir(parents=True)
    (d / "w.npy").write_bytes(b"\0" * nbytes)
    (d / "manifest.json").write_text("{}")
    os.utime(d / "manifest.json", (used, used))
    return d


def test_prune_removes_real_folders_oldest_first_and_empty_file_folders(tmp_path):
    v = LAYOUT_VERSION
    old = entry(tmp_path, "f1", f"0-15-quantized-v{v}", 4000, 100.0)
    stale = entry(tmp_path, "f1", f"0-30-quantized-v{v - 1}", 10, 900.0)
    mid = entry(tmp_path, "f2", f"0-15-float32-v{v}", 4000, 200.0)
    new = entry(tmp_path, "f2", f"15-30-float32-v{v}", 4000, 300.0)
    (tmp_path / "f2" / "not-an-entry").mkdir()          # not ours: left alone
    gone = prune(tmp_path, keep=new, budget=9000)
    assert sorted(gone) == sorted([old, stale])
    assert not (tmp_path / "f1").exists()                # its last entry gone, so is it
    assert mid.is_dir() and new.is_dir() and (tmp_path / "f2" / "not-an-entry").is_dir()
