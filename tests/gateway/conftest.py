"""One real `llmbus up` (real processes, the real model) shared by the client tests."""

from __future__ import annotations

import pytest

from ..serve.stack import Stack

MAX_QUEUE = 4


@pytest.fixture(scope="package")
def stack(tmp_path_factory, model_path):
    s = Stack(tmp_path_factory.mktemp("gateway-runtime"), "--shards", "2", "--max-queue",
              str(MAX_QUEUE), "--model", str(model_path))
    yield s
    rc = s.stop()
    assert rc == 0, s.drain_output()
