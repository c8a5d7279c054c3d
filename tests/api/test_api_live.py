"""The producer API behind a real daphne (config.asgi, as the Procfile's web runs it): what
only the server shows, the status line and the bodies Twisted sees before Django (issue 41,
section 4)."""
from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from http import HTTPStatus

import pytest
from django.db import connection
from django.test import Client

from tests.api.conftest import client_sessions, producer
from tests.browser.conftest import Daphne
from tests.factories import make_org, make_user, make_workflow

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
    assert (status, reason) == (422, HTTPStatus(422).phrase)  # "Unprocessable Entity" (3.13: "... Content")
    status, reason, _, _ = call(web.port, "POST", "/api/v1/charts", b'{"workflow": "code"}', headers)
    assert (status, reason) == (429, HTTPStatus(429).phrase)


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


def _timed_get(port: int, path: str, headers: dict[str, str]) -> tuple[int, float]:
    t0 = time.monotonic()
    status, _, _, _ = call(port, "GET", path, None, headers)
    return status, time.monotonic() - t0


def test_staff_waiting_on_the_planner_hold_no_pooled_connection(test_db_url, redis_url, monkeypatch):
    """Suspected in issue 41 (section 4), confirmed on PostgreSQL: a what-if or planner request
    held its pooled connection while it waited on Redis for the scheduler (up to 20 s); ten of
    them at once held 8 of the pool's 10 and a producer's GET waited 4.7 s for one. The view
    gives the connection back before it waits. (SQLite has no pool: it shows the same answers.)"""
    monkeypatch.setenv("FAIRSCHED_API_RATE", "0")
    monkeypatch.setenv("FAIRSCHED_PLAN_WAIT_S", "6")  # no scheduler runs: every plan waits it out
    monkeypatch.setenv("FAIRSCHED_DB_POOL_SIZE", "4")
    make_workflow("code")
    acme = producer(make_org("Acme"))
    staff = Client()
    staff.force_login(make_user("boss", superuser=True))
    session = {"Cookie": f"sessionid={staff.cookies['sessionid'].value}"}
    key = {"Authorization": f"Bearer {acme.raw}"}
    server = Daphne(test_db_url, redis_url, log_name="daphne-api-live.log").start()
    try:
        assert _timed_get(server.port, "/api/v1/charts", key)[0] == 200  # warm
        before = client_sessions() if connection.vendor == "postgresql" else set()
        plans: list[tuple[int, float]] = []
        waiting = [threading.Thread(target=lambda: plans.append(
            _timed_get(server.port, "/dashboard/whatif.json?meet_due=1", session))) for _ in range(10)]
        for t in waiting:
            t.start()
        time.sleep(2)  # all ten are waiting on Redis by now
        held = len(client_sessions() - before) if connection.vendor == "postgresql" else 0
        status, seconds = _timed_get(server.port, "/api/v1/charts", key)
        for t in waiting:
            t.join(30)
    finally:
        server.stop()
    assert status == 200 and seconds < 1.5, seconds
    assert held <= 2, held
    assert [s for s, _ in plans] == [503] * 10 and min(s for _, s in plans) > 5
