"""One `llmbus up --shards 3` shared by the disruption tests (chaos, kill drills): one start."""

from __future__ import annotations

import pytest

from ..serve.stack import Stack


@pytest.fixture(scope="package")
def up3(tmp_path_factory, model_path):
    s = Stack(tmp_path_factory.mktemp("up3"), "--shards", "3", "--model", str(model_path))
    yield s
    s.close()
