"""The producer API behind a real daphne (config.asgi, as the Procfile's web runs it): what
only the server shows, the status line and the bodies Twisted sees before Django (issue 41,
section 4)."""
from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest

from tests.api.conftest import producer
from tests.browser.conftest import Daphne
from tests.factories import make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def web(test_db_url, redis_url, monkeypatch) -> Iterator[Daphne]:
    monkeypatch.setenv("FAIRSCHED_API_RATE", "0")  # daphne's environment is this one's
    server = Daphne(test_db_url, redis_url, log_name="daphne-api-live.log").start()
    try:
        yield server
    finally:
        server.stop()


def call(port: int, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        return response.status, response.reason, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_status_lines_name_422_and_429(web):
    """Twisted's table had no phrase for them: "422 Unknown Status" (4.11)."""
    make_workflow("code")
    acme = producer(make_org("Acme"))
    acme.org.max_queued = 0
    acme.org.save()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {acme.raw}"}
    status, reason, _, _ = call(web.port, "POST", "/api/v1/charts", b'{"workflow": "code", "bogus": 1}', headers)
    assert (status, reason) == (422, "Unprocessable Entity")
    status, reason, _, _ = call(web.port, "POST", "/api/v1/charts", b'{"workflow": "code"}', headers)
    assert (status, reason) == (429, "Too Many Requests")


@pytest.mark.parametrize("key", [None, "multipart-1"])
@pytest.mark.parametrize(("content_type", "body"), [
    ("multipart/form-data", b'{"workflow": "code"}'),  # no boundary: Twisted answered a bare 400
    ("multipart/form-data; boundary=XX", b"not multipart at all"),
    ("multipart/form-data; boundary=XX",
     b'--XX\r\nContent-Disposition: form-data; name="workflow"\r\n\r\ncode\r\n--XX--\r\n'),
])
def test_a_multipart_body_is_a_415_problem(web, key, content_type, body):
    """docs/api.md: a body that is not JSON is a 415 problem+json, whatever Twisted makes of it (4.8)."""
    make_workflow("code")
    acme = producer(make_org("Acme"))
    headers = {"Content-Type": content_type, "Authorization": f"Bearer {acme.raw}"}
    if key:
        headers["Idempotency-Key"] = key
    status, reason, got, raw = call(web.port, "POST", "/api/v1/charts", body, headers)
    assert (status, reason) == (415, "Unsupported Media Type"), raw
    assert got["Content-Type"] == "application/problem+json"
    assert list(json.loads(raw)["errors"]) == ["Content-Type"]
