"""Finding: a read-only cache directory stopped every shard. The weight cache is an
optimisation: a cache that cannot be written means serving from the GGUF, with one warning."""

from __future__ import annotations

import logging
import os

import pytest

from services.modelstore import weight_cache
from tests.engine.tiny_gguf import write_tiny_llama


def unwritable(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    if os.geteuid() == 0:      # root writes through modes: a file where the folder must be
        (root / "weights").write_text("")
    else:
        root.chmod(0o555)
    return root


def test_an_unwritable_cache_serves_with_one_warning(tmp_path, caplog):
    model_path = write_tiny_llama(tmp_path / "m.gguf", seed=3)
    root = unwritable(tmp_path)
    with caplog.at_level(logging.WARNING, "llmbus.modelstore"):
        for _ in range(2):
            loaded = weight_cache.load_weights(model_path, 0, 1, "quantized", root=root)
            assert loaded.cold and loaded.config.n_layers >= 1
    warnings = [r for r in caplog.records if "serving without caching" in r.getMessage()]
    assert len(warnings) == 1


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(weight_cache, "_warned", set(), raising=False)
