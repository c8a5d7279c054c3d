"""Requests generated from the API's own OpenAPI schema (schemathesis): no answer is a 5xx,
and every answer (status, content type, headers, body) is what the schema says. Bounded:
a few examples per operation, derandomized, no deadline, so it adds seconds, not minutes."""
from __future__ import annotations

from contextlib import contextmanager

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings as hyp_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance, response_headers_conformance, response_schema_conformance, status_code_conformance)

from charts.models import Chart

pytestmark = pytest.mark.django_db

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
EXAMPLES = 10


@contextmanager
def wsgi_app():
    """The project's WSGI app on the test's database connection (as Django's test client
    does it: a request must not close the test's connection; the test client reconnects
    the handlers after each of its own requests, so no test client request inside)."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        for signal in (request_started, request_finished):
            signal.connect(close_old_connections)


def test_generated_requests_get_no_5xx_and_match_the_schema(api_world):
    acme, beta = api_world["acme"], api_world["beta"]
    for p in (acme, beta):  # charts the generated ids may hit: one's own, another org's
        p.post("/charts", {"workflow": "code", "external_id": "known"})
    seen: dict[str, set[int]] = {}
    with wsgi_app() as app:
        schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) == 6
        for operation in operations:
            @given(case=operation.as_strategy())
            @hyp_settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                          suppress_health_check=list(HealthCheck))
            def run(case):
                headers = {"Authorization": f"Bearer {acme.raw}"}
                response = case.call_and_validate(headers=headers, checks=CHECKS)
                seen.setdefault(operation.label, set()).add(response.status_code)

            run()
    assert set(seen) == {op.label for op in operations}
    assert Chart.objects.filter(org=beta.org).count() == 1  # nothing generated reached another org
