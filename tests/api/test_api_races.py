"""Concurrent submissions (issue 41, 4.5-4.7): real threads, each with its own database
connection, sending real requests through the whole stack at the same moment, on SQLite and
on PostgreSQL. Each race runs several rounds: one round may not interleave."""
from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection
from django.test import Client

from charts.models import Chart, ChartState
from tests.api.conftest import producer
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def at_once(n: int, request: Callable[[Client], object]) -> list:
    """``request`` from ``n`` threads released together; their responses, in thread order."""
    barrier = threading.Barrier(n)
    out: list = [None] * n

    def run(i: int) -> None:
        client = Client()
        try:
            barrier.wait(30)
            out[i] = request(client)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            out[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not [t for t in threads if t.is_alive()]
    return out


@pytest.fixture
def acme(settings):
    settings.FAIRSCHED_API_RATE = 0.0
    make_workflow("code")
    return producer(make_org("Acme"))


def _post(acme, path: str, body: dict):
    def request(client: Client):
        return client.post(f"/api/v1{path}", body, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {acme.raw}")
    return request


def test_identical_batches_at_once_create_the_charts_once_and_answer_each(acme):
    """One of two identical batches (same external_ids, no Idempotency-Key) was a 500, an
    IntegrityError, in 3 runs of 3 (4.5). Now the other is told they exist, as chart_submit does."""
    for round_ in range(4):
        body = {"charts": [{"workflow": "code", "external_id": f"r{round_}-{i}"} for i in range(100)]}
        responses = at_once(4, _post(acme, "/charts/batch", body))
        statuses = sorted(getattr(r, "status_code", r) for r in responses)
        assert statuses == [200, 200, 200, 201], (round_, [getattr(r, "content", r) for r in responses])
        for r in responses:
            got = r.json()
            assert (got["created"], got["existing"]) == ((100, 0) if r.status_code == 201 else (0, 100))
            assert [c["external_id"] for c in got["charts"]] == [c["external_id"] for c in body["charts"]]
        ids = {c["id"] for r in responses for c in r.json()["charts"]}
        assert ids == set(Chart.objects.filter(external_id__startswith=f"r{round_}-").values_list("pk", flat=True))
    assert Chart.objects.count() == 400


def test_identical_singles_at_once_are_one_201_and_the_rest_200(acme):
    """Two singles with the same external_id both got 201 in 2 runs of 3 (4.7): the view guessed
    from the chart's creation time. The service now says whether this call created it."""
    for round_ in range(6):
        responses = at_once(4, _post(acme, "/charts", {"workflow": "code", "external_id": f"s-{round_}"}))
        statuses = sorted(getattr(r, "status_code", r) for r in responses)
        assert statuses == [200, 200, 200, 201], (round_, [getattr(r, "content", r) for r in responses])
        assert len({r.json()["id"] for r in responses}) == 1
    assert Chart.objects.count() == 6


def test_concurrent_batches_cannot_pass_the_org_s_cap_together(acme):
    """Three batches of 1,000 under a cap of queued + 1,000 all got 201: 2,000 over (4.6). The
    cap is counted inside the write transaction, the org's row locked: one passes, the rest 429."""
    org = acme.org
    for i in range(5):
        make_chart(org, make_workflow("code"), external_id=f"before-{i}")
    queued = Chart.objects.filter(org=org, state=ChartState.QUEUED).count()
    org.max_queued = queued + 200
    org.save()
    for round_ in range(2):
        body = {"charts": [{"workflow": "code"} for _ in range(200)]}
        responses = at_once(3, _post(acme, "/charts/batch", body))
        statuses = sorted(getattr(r, "status_code", r) for r in responses)
        expected = [201, 429, 429] if round_ == 0 else [429, 429, 429]
        assert statuses == expected, (round_, [getattr(r, "content", r) for r in responses])
        assert Chart.objects.filter(org=org, state=ChartState.QUEUED).count() == queued + 200
