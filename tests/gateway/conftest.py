"""One real `llmbus up` (real processes, the real model) shared by the client tests."""

from __future__ import annotations

import openai
import pytest

from ..serve.stack import Stack

MAX_QUEUE = 4


@pytest.fixture(scope="package")
def stack(tmp_path_factory, model_path):
    # --model by its pull name (the file is the one model_path pulled)
    s = Stack(tmp_path_factory.mktemp("gateway-runtime"), "--shards", "2", "--max-queue",
              str(MAX_QUEUE), "--model", "smollm2-135m-instruct-q4_1")
    yield s
    s.close()


@pytest.fixture(scope="package")
def oai(stack):
    """The official OpenAI client on the stack's gateway, validating every response strictly."""
    c = openai.OpenAI(base_url=stack.http + "/v1", api_key="unused", max_retries=0,
                      timeout=120, _strict_response_validation=True)
    yield c
    c.close()


@pytest.fixture(scope="package")
def model(oai):
    """The id the cluster serves, as /v1/models lists it."""
    return oai.models.list().data[0].id
