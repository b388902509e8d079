"""One real `llmbus up` (one shard) shared by the gateway's security tests that need a cluster.
It lets in one more host name and one page of another site (`llmbus up --allowed-host`,
`--cors-origin`, handed on to its gateway); every other one is refused as by default."""

from __future__ import annotations

import pytest

from ..serve.stack import Stack

ALLOWED_HOST = "llm.lan"
FRONT = "https://front.example"


@pytest.fixture(scope="package")
def gw_stack(tmp_path_factory, model_path):
    s = Stack(tmp_path_factory.mktemp("security-gw"), "--shards", "1", "--model", str(model_path),
              "--allowed-host", ALLOWED_HOST, "--cors-origin", FRONT)
    yield s
    s.close()
