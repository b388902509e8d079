"""Engine fixtures: tiny random llama GGUFs, and the real model's weights through the cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from services.modelstore.weight_cache import load_weights
from services.shard.kv_cache import KVConfig, PagedKVCache
from services.shard.model import ShardModel
from tests.engine.tiny_gguf import write_tiny_llama

REFERENCE = Path(__file__).parent.parent / "data" / "smollm2-135m-q4_1.llamacpp.json"


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf", qtype=QT.Q4_1)


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("weights-cache")


@pytest.fixture(scope="session")
def reference() -> dict:
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="session")
def real_weights(model_path):
    """Dequantized weights of all 30 layers, through the user's weight cache (cold once, then mmap)."""
    return load_weights(model_path, 0, 30)


@pytest.fixture(scope="session")
def real_quantized(model_path):
    """The GGUF blocks of all 30 layers, as a CPU shard keeps them by default (weights "auto")."""
    return load_weights(model_path, 0, 30, "quantized")


def make_shard(path_or_loaded, start=None, end=None, *, num_pages=64, page_size=16, root=None, trace=None):
    """A ShardModel over [start, end) of a model file (or of already loaded full-range weights)."""
    loaded = path_or_loaded if start is None else load_weights(path_or_loaded, start, end, root=root)
    cfg, w = loaded.config, loaded.weights
    kv = PagedKVCache.for_model(cfg, w.start, w.end, KVConfig(num_pages, page_size))
    return ShardModel(cfg, w, kv, trace=trace)
