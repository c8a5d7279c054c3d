"""The API tier as docs/deploying.md deploys it: a real gunicorn with the repository's settings
(``config/gunicorn.conf.py``, ``config.wsgi``), against the test database and a real Redis.

It answers the producer API as daphne does (a 201 with its ``Location``, a problem+json that
names the field, the chart read back, a 401 without a key), serves the scrape target and the
API's docs page with its files, its workers send the scheduler the chart's
note over Redis after the commit, as daphne's process does, and a SIGTERM stops it warm."""
from __future__ import annotations

import http.client
import json
import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import redis
from django.db import connection

from charts.models import Chart
from common import notify
from fairsched.runtime import embedded
from tests.api.conftest import client_sessions, producer
from tests.factories import make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "var" / "test-artifacts"


class Gunicorn:
    def __init__(self, db_url: str, redis_url: str) -> None:
        self.port, self.db_url = embedded.free_port(), db_url
        env = {k: v for k, v in os.environ.items() if k != "FAIRSCHED_CHANNEL_LAYER"}
        env.update(DATABASE_URL=db_url, REDIS_URL=redis_url, DJANGO_SETTINGS_MODULE="config.settings",
                   DJANGO_DEBUG="0", DJANGO_SECRET_KEY="api-tier-test", DJANGO_SECURE_SSL_REDIRECT="0",
                   DJANGO_ALLOWED_HOSTS="127.0.0.1", FAIRSCHED_API_RATE="0", WEB_CONCURRENCY="2",
                   PYTHONUNBUFFERED="1")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.log = ARTIFACTS / "gunicorn-api-tier.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "gunicorn"), "-c", "config/gunicorn.conf.py",
                 "-b", f"127.0.0.1:{self.port}", "config.wsgi"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        embedded.wait_for_port(self.port, timeout=60, proc=self.proc)

    def request(self, method: str, path: str, key: str | None = None, body=None) -> tuple[int, dict, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        return response.status, dict(response.getheaders()), json.loads(raw) if raw else {}

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                return None
        return self.proc.returncode


@pytest.fixture
def tier(test_db_url, redis_url):
    server = Gunicorn(test_db_url, redis_url)
    try:
        yield server
    finally:
        server.stop()


def test_gunicorn_serves_the_producer_api_and_notifies_the_scheduler(tier, redis_url):
    make_workflow("code")
    acme = producer(make_org("Acme"))
    listener = redis.Redis.from_url(redis_url).pubsub()
    listener.subscribe(notify.CHANNEL)
    assert listener.get_message(timeout=5)["type"] == "subscribe"

    status, headers, body = tier.request("POST", "/api/v1/charts", acme.raw,
                                         {"workflow": "code", "payload": {"seconds": 1}, "external_id": "mrn-7"})
    assert status == 201, body
    assert headers["Location"].endswith(f"/api/v1/charts/{body['id']}")
    chart = Chart.objects.get(pk=body["id"])
    assert (chart.org_id, chart.external_id, chart.state) == (acme.org.pk, "mrn-7", "queued")

    # the scheduler hears of the chart from the tier, not only from its next resync
    deadline, notes = time.monotonic() + 10, []
    while time.monotonic() < deadline and not any(n.get("kind") == "chart" and n.get("id") == chart.pk for n in notes):
        message = listener.get_message(timeout=1)
        if message and message["type"] == "message":
            notes.append(json.loads(message["data"]))
    assert {"kind": "chart", "id": chart.pk} in notes
    listener.close()

    status, _, read = tier.request("GET", f"/api/v1/charts/{chart.pk}", acme.raw)
    assert status == 200 and read["external_id"] == "mrn-7" and read["state"] == "queued"

    status, headers, problem = tier.request("POST", "/api/v1/charts", acme.raw, {"workflow": "nope"})
    assert status == 422 and headers["Content-Type"] == "application/problem+json"
    assert list(problem["errors"]) == ["workflow"]

    status, headers, problem = tier.request("GET", "/api/v1/status")
    assert status == 401 and headers["Content-Type"] == "application/problem+json"
    assert Chart.objects.count() == 1

    # the scrape target, routed to the tier too: loopback without a token, as on daphne, with the
    # database's figures (the request counts are best effort, a Redis write that may time out
    # under load and is dropped: tests/test_metrics.py checks them)
    want = ['fairsched_charts{org="acme",state="queued"} 1.0', "# TYPE fairsched_api_requests_total counter"]
    deadline, lines = time.monotonic() + 10, []
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", tier.port, timeout=30)
        conn.request("GET", "/metrics")
        scrape = conn.getresponse()
        lines = scrape.read().decode().splitlines()
        conn.close()
        assert scrape.status == 200 and scrape.getheader("Content-Type").startswith("text/plain")
        if all(w in lines for w in want):
            break
        time.sleep(0.2)
    assert all(w in lines for w in want), [line for line in lines if "api_requests" in line or "acme" in line]


def test_the_tier_serves_the_api_docs_page_and_its_files(tier):
    import re

    conn = http.client.HTTPConnection("127.0.0.1", tier.port, timeout=30)
    conn.request("GET", "/api/v1/docs")
    page = conn.getresponse()
    html = page.read().decode()
    assert page.status == 200 and "text/html" in page.getheader("Content-Type")
    scripts = re.findall(r'src="(/static/[^"]+\.js)"', html)
    assert scripts, html[:500]
    for src in scripts:  # FAIRSCHED_SERVE_STATIC (the default): served here too, as daphne does
        conn.request("GET", src)
        r = conn.getresponse()
        r.read()
        assert r.status == 200, src
    conn.close()


def test_a_sigterm_stops_the_tier_warm(tier):
    assert tier.request("GET", "/healthz")[0] == 200
    t0 = time.monotonic()
    assert tier.stop() == 0, tier.log.read_text()[-2000:]
    assert time.monotonic() - t0 < 10


def test_on_postgresql_the_tier_s_threads_keep_their_connections(tier, acme):
    """A gthread worker's threads keep a connection each from one request to the next
    (config/gunicorn.conf.py's ``post_worker_init``): 30 requests leave at least one open and at
    most one a thread (2 processes x the conf's threads on PostgreSQL), where the settings'
    ``CONN_MAX_AGE = 0`` opened and closed one a request (singles 93/s against 218/s kept,
    bench/api.py --postgres)."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite's backend keeps its connections already (common/pooled_sqlite3)")
    with mock.patch.dict(os.environ, DATABASE_URL=tier.db_url):
        threads = runpy.run_path(str(ROOT / "config" / "gunicorn.conf.py"))["threads"]
    before = client_sessions()
    for i in range(30):
        status, _, body = tier.request("POST", "/api/v1/charts", acme.raw, {"workflow": "code"})
        assert status == 201, body
    time.sleep(0.5)  # a connection closed at a request's end is gone by now
    kept = client_sessions() - before
    assert 1 <= len(kept) <= 2 * threads, (kept, threads)
    assert Chart.objects.count() == 30


def test_on_postgresql_a_kept_connection_the_server_ended_is_replaced_before_a_request_uses_it(tier, acme):
    """The tier checks a kept connection by its socket, not by ``SELECT 1`` (common.quiet_check):
    after the server ends every session of the tier (a restart, an idle timeout), the next
    requests still get 201s, not a 503, on new sessions."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's kept connections")
    before = client_sessions()
    for i in range(10):
        assert tier.request("POST", "/api/v1/charts", acme.raw, {"workflow": "code"})[0] == 201
    kept = client_sessions() - before
    assert kept
    with connection.cursor() as cursor:
        for pid in kept:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    time.sleep(0.2)
    for i in range(10):
        status, _, body = tier.request("POST", "/api/v1/charts", acme.raw, {"workflow": "code"})
        assert status == 201, body
    assert not kept & client_sessions() and Chart.objects.count() == 20
