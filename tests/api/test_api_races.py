"""Concurrent submissions (issue 41, 4.5-4.7): real threads, each with its own database
connection, sending real requests through the whole stack at the same moment, on SQLite and
on PostgreSQL. Each race runs several rounds: one round may not interleave."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection
from django.test import Client

from charts.models import Chart, ChartState
from tests.factories import make_chart, make_workflow

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


def test_a_retry_never_takes_over_a_request_still_running(acme, monkeypatch):
    """Suspected in issue 41 (section 4), confirmed on PostgreSQL: a request with an
    Idempotency-Key still working after IN_FLIGHT_STALE_S (120 s; here 0.2 s) was taken over by
    its retry, which ran the work again: two charts without an external_id. The working request
    holds its row locked; a retry takes over only a row nobody holds (its process died)."""
    from api import idempotency
    from charts import services as chart_services

    monkeypatch.setattr(idempotency, "IN_FLIGHT_STALE_S", 0.2)
    inside, release = threading.Event(), threading.Event()
    real = chart_services.chart_submit_created

    def slow(**kwargs):
        if not inside.is_set():
            inside.set()
            assert release.wait(30)
        return real(**kwargs)

    monkeypatch.setattr(chart_services, "chart_submit_created", slow)

    def keyed(client: Client):
        return client.post("/api/v1/charts", {"workflow": "code"}, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {acme.raw}", HTTP_IDEMPOTENCY_KEY="slow-1")

    first: list = []
    worker = threading.Thread(target=lambda: (first.append(keyed(Client())), connection.close()))
    worker.start()
    try:
        assert inside.wait(30)
        time.sleep(0.5)  # older than IN_FLIGHT_STALE_S, and still working
        # SQLite: the retry waits for the one writer, the first request; let it finish meanwhile
        threading.Timer(1.0, release.set).start()
        retry = keyed(Client())
    finally:
        release.set()
        worker.join(30)
    assert first[0].status_code == 201, first[0].content
    assert retry.status_code == 409 or (retry.status_code == 201 and retry.get("Idempotent-Replayed") == "true"), \
        retry.content
    assert Chart.objects.count() == 1
    replay = keyed(Client())
    assert replay["Idempotent-Replayed"] == "true" and replay.content == first[0].content


def test_a_row_left_by_a_dead_request_is_taken_over_by_its_retry(acme):
    """The other side of the lock: a row in flight past IN_FLIGHT_STALE_S that no request holds
    (its process died: nothing of it was committed but the row) is run by the retry."""
    import hashlib
    from datetime import timedelta

    from django.utils import timezone

    from api.idempotency import IN_FLIGHT_STALE_S
    from api.models import IdempotencyKey

    body = '{"workflow": "code"}'
    fp = hashlib.sha256(b"POST /api/v1/charts\n" + body.encode()).hexdigest()
    then = timezone.now() - timedelta(seconds=IN_FLIGHT_STALE_S + 1)
    IdempotencyKey.objects.create(org=acme.org, key="dead-1", fingerprint=fp, created_at=then,
                                  expires_at=then + timedelta(days=1))
    young = IdempotencyKey.objects.create(org=acme.org, key="young-1", fingerprint=fp, created_at=timezone.now(),
                                          expires_at=then + timedelta(days=1))
    assert acme.client.post("/api/v1/charts", body, content_type="application/json",
                            HTTP_IDEMPOTENCY_KEY="young-1").status_code == 409
    retry = acme.client.post("/api/v1/charts", body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="dead-1")
    assert retry.status_code == 201, retry.content
    assert IdempotencyKey.objects.get(key="dead-1").status == 201
    assert Chart.objects.count() == 1 and young.pk
