"""The on-disk weight cache: built once per (file, range, dtype), loaded back by mmap, never half-written."""

import os

import numpy as np

from services.modelstore.weight_cache import entry_path, file_identity, load_weights
from services.modelstore.weights import read_weights
from tests.engine.tiny_gguf import write_tiny_llama


def test_cold_then_warm_gives_the_same_arrays(tiny_path, tmp_path):
    cold = load_weights(tiny_path, 1, 3, root=tmp_path)
    warm = load_weights(tiny_path, 1, 3, root=tmp_path)
    assert cold.cold and not warm.cold and cold.path == warm.path
    assert warm.config == cold.config
    assert isinstance(warm.weights.wqkv, np.memmap)                  # mmap, not a read into memory
    for name, a in cold.weights.arrays().items():
        np.testing.assert_array_equal(getattr(warm.weights, name), a)
    _, direct = read_weights(tiny_path, 1, 3)
    np.testing.assert_array_equal(warm.weights.w_down, direct.w_down)
    assert [p.name for p in cold.path.parent.iterdir()] == [cold.path.name]   # no temp dir left


def test_key_covers_range_and_dtype(tiny_path, tmp_path):
    paths = {entry_path(tiny_path, a, b, dt, tmp_path) for a, b, dt in
             [(0, 1, "float32"), (0, 2, "float32"), (1, 2, "float32"), (0, 1, "float16")]}
    assert len(paths) == 4
    f16 = load_weights(tiny_path, 0, 1, "float16", root=tmp_path)
    assert f16.weights.wqkv.dtype == np.float16 and f16.cold


def test_a_rewritten_model_file_gets_a_new_entry(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf", seed=1)
    before = file_identity(path)
    first = load_weights(path, 0, 1, root=tmp_path / "c")
    write_tiny_llama(path, seed=2)
    os.utime(path, ns=(1, os.stat(path).st_mtime_ns + 1))            # even if the clock is coarse
    assert file_identity(path) != before
    second = load_weights(path, 0, 1, root=tmp_path / "c")
    assert second.cold and not np.array_equal(second.weights.wqkv, first.weights.wqkv)


def test_a_damaged_entry_is_rebuilt(tiny_path, tmp_path):
    entry = load_weights(tiny_path, 0, 1, root=tmp_path).path
    (entry / "wqkv.npy").write_bytes(b"not an array")
    again = load_weights(tiny_path, 0, 1, root=tmp_path)
    assert again.cold and again.weights.wqkv.shape == (1, 128, 64)


def test_a_copy_of_the_model_has_the_same_bus_identity_but_its_own_cache_key(tmp_path, model_path):
    import os
    import shutil

    from services.modelstore.identity import model_identity
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(model_path, copy)
    os.utime(copy, ns=(1, 1))  # another machine's copy: same bytes, another mtime
    assert model_identity(copy) == model_identity(model_path)
    assert file_identity(copy) != file_identity(model_path)
    with open(copy, "r+b") as f:  # one byte changed in the tail: another model
        f.seek(-10, 2)
        f.write(b"\x01")
    assert model_identity(copy) != model_identity(model_path)


def test_loads_mark_their_entry_used_and_a_new_entry_cuts_the_cache_to_its_budget(
        tiny_path, tmp_path, monkeypatch):
    first = load_weights(tiny_path, 0, 1, root=tmp_path).path
    second = load_weights(tiny_path, 1, 2, root=tmp_path).path
    os.utime(first / "manifest.json", (1, 1))
    os.utime(second / "manifest.json", (2, 2))
    assert not load_weights(tiny_path, 0, 1, root=tmp_path).cold     # a hit: first is now the newest
    assert (first / "manifest.json").stat().st_mtime > 2
    size = sum(f.stat().st_size for f in first.iterdir())
    # A budget that holds two entries of this size: the third written pushes out the least
    # recently used, which is `second` (loaded before `first` was loaded again).
    monkeypatch.setenv("LLMBUS_WEIGHT_CACHE_GB", str(2.5 * size / 2**30))
    third = load_weights(tiny_path, 2, 3, root=tmp_path)
    assert third.cold and third.path.is_dir() and first.is_dir() and not second.exists()


def _mapped(path) -> bool:
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(str(path)) for line in f)


def test_a_cold_load_serves_from_its_new_entry_and_lets_the_gguf_go(tmp_path):
    """A shard that builds its own range (first and last: embedding and head too) holds it once, as
    the entry's maps: nothing of the GGUF stays mapped, no stacked copy stays in memory."""
    import gc
    path = write_tiny_llama(tmp_path / "m.gguf", seed=3)
    for fmt in ("quantized", "float32"):
        cold = load_weights(path, 0, 3, fmt, root=tmp_path / "c")
        gc.collect()
        assert cold.cold and not _mapped(path), f"{fmt}: the GGUF is still mapped after a cold load"
        for name, a in cold.weights.arrays().items():
            data = a.data if hasattr(a, "data") and isinstance(a.data, np.ndarray) else a
            assert not data.flags.writeable, f"{fmt}: {name} is an array in memory, not the entry's map"
        warm = load_weights(path, 0, 3, fmt, root=tmp_path / "c")
        for name, a in cold.weights.arrays().items():
            b = getattr(warm.weights, name)
            np.testing.assert_array_equal(getattr(b, "data", b), getattr(a, "data", a))


def test_a_cache_with_no_room_serves_from_the_gguf_and_leaves_no_partial_entry(tmp_path, monkeypatch, caplog):
    """The build reserves each stacked matrix's space before writing into its mapping: a full
    disk is an OSError at that point (not a SIGBUS at a page later), the shard serves from the
    GGUF, and nothing half-built stays in the cache."""
    import errno

    path = write_tiny_llama(tmp_path / "m.gguf", seed=3)

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    want = load_weights(path, 0, 3, "quantized", root=tmp_path / "other")
    monkeypatch.setattr("os.posix_fallocate", full)
    got = load_weights(path, 0, 3, "quantized", root=tmp_path / "c")
    assert got.cold and not got.path.exists()
    assert not any(p.is_file() for p in (tmp_path / "c").rglob("*")), "a partial entry was left"
    for name, a in want.weights.arrays().items():
        b = getattr(got.weights, name)
        np.testing.assert_array_equal(getattr(b, "data", b), getattr(a, "data", a))
    assert "cannot write" in caplog.text
