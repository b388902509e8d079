"""One real `llmbus up` (one shard) shared by the gateway's security tests that need a cluster."""

from __future__ import annotations

import pytest

from ..serve.stack import Stack


@pytest.fixture(scope="package")
def gw_stack(tmp_path_factory, model_path):
    s = Stack(tmp_path_factory.mktemp("security-gw"), "--shards", "1", "--model", str(model_path))
    yield s
    s.close()
