"""schemathesis drives every operation of `/openapi.json` on a real stack: no server error,
and no answer off the schema the document declares for it.

Examples are bounded per operation, and generation is bounded per request (every token
budget clamped to a few tokens, and set where a body leaves it open), so that a run stays
within a couple of minutes on a small machine.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance,
                                               response_schema_conformance,
                                               status_code_conformance)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MAX_TOKENS = 3
# Paths whose bodies generate text, and the field that bounds it.
_BUDGETS = {"/v1/chat/completions": "max_tokens", "/v1/completions": "max_tokens",
            "/v1/messages": "max_tokens"}


@pytest.fixture(scope="module")
def api_schema(stack):
    return schemathesis.openapi.from_url(stack.http + "/openapi.json")


def bound(case) -> None:
    """Clamp a generated body's token budget (a schema-valid body may ask for the whole
    context, which is minutes of generation here)."""
    body = case.body
    if not isinstance(body, dict):
        return
    path = case.operation.path
    if path in _BUDGETS:
        body.pop("max_completion_tokens", None)
        body["max_tokens"] = min(body.get("max_tokens") or MAX_TOKENS, MAX_TOKENS)
        body["n"] = min(body.get("n") or 1, 2)
    elif path == "/v1/responses":
        body["max_output_tokens"] = min(body.get("max_output_tokens") or MAX_TOKENS, MAX_TOKENS)
    elif path in ("/api/chat", "/api/generate"):
        options = body.get("options") if isinstance(body.get("options"), dict) else {}
        n = options.get("num_predict")
        options["num_predict"] = MAX_TOKENS if not isinstance(n, int) or n < 1 else min(n, MAX_TOKENS)
        body["options"] = options


CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance,
          content_type_conformance]


def test_the_gateway_keeps_to_its_openapi_document(api_schema):
    operations = [r.ok() for r in api_schema.get_all_operations()]
    paths = {op.path for op in operations}
    assert {"/v1/chat/completions", "/v1/messages", "/api/chat", "/health"} <= paths
    for op in operations:
        @given(op.as_strategy())
        @settings(max_examples=12, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            bound(case)
            case.call_and_validate(timeout=60, checks=CHECKS)
        run()
