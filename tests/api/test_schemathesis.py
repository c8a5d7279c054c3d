"""Requests generated from the API's own OpenAPI schema (schemathesis): no answer is a 5xx,
and every answer (status, content type, headers, body) is what the schema says. Bounded:
a few examples per operation, derandomized, no deadline, so it adds seconds, not minutes."""
from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings as hyp_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance, response_headers_conformance, response_schema_conformance, status_code_conformance)

from charts import services as chart_services
from charts.models import Chart
from tests.api.conftest import producer
from tests.browser.conftest import ARTIFACTS, Daphne
from tests.factories import make_org, make_workflow

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


# --- the CLI, --checks all, against a live daphne --------------------------------------------

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
CONFIG = Path(__file__).with_name("schemathesis.toml")
CLI_EXAMPLES = 15


@pytest.fixture
def live_api(test_db_url, redis_url, monkeypatch):
    """daphne (config.asgi, as the Procfile's web) on the test database, with a submit key, a
    read key and another org's chart."""
    monkeypatch.setenv("FAIRSCHED_API_RATE", "0")  # the rate limit has its own tests
    make_workflow("code")
    acme, beta = make_org("Acme"), make_org("Beta")
    keys = {"submit": producer(acme).raw, "read": producer(acme, "read").raw, "none": None}
    chart_services.chart_submit(org=beta, workflow="code", external_id="known")
    chart_services.chart_submit(org=acme, workflow="code", external_id="known")
    server = Daphne(test_db_url, redis_url, log_name="daphne-schemathesis.log").start()
    try:
        yield server, keys, (acme, beta)
    finally:
        server.stop()


@pytest.mark.slow(60)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("key", ["submit", "read", "none"])
def test_schemathesis_checks_all_against_the_live_api(live_api, key, tmp_path):
    """``schemathesis run --checks all`` (every phase: examples, coverage, fuzzing, stateful;
    positive and negative data) with each kind of caller: 0 failures."""
    server, keys, (acme, beta) = live_api
    command = [str(SCHEMATHESIS), "--config-file", str(CONFIG), "run", f"http://127.0.0.1:{server.port}/api/v1/openapi.json",
               "--checks", "all", "--max-examples", str(CLI_EXAMPLES), "--seed", "41", "--workers", "1",
               "--generation-database", "none", "--no-color", "--request-timeout", "30"]
    if keys[key]:
        command += ["--header", f"Authorization: Bearer {keys[key]}"]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"schemathesis-{key}.txt").write_text(run.stdout + run.stderr)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert Chart.objects.filter(org=beta).count() == 1  # nothing generated reached another org
