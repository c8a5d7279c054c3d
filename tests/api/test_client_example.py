"""examples/api_client.py against a live server: it submits, reads, pages and cancels; it
retries a 429 after Retry-After with the same Idempotency-Key; a refusal raises with the
problem's fields."""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from charts.models import Chart
from tests.api.conftest import producer
from tests.factories import make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)

_spec = importlib.util.spec_from_file_location(
    "api_client", Path(__file__).resolve().parents[2] / "examples" / "api_client.py")
api_client = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api_client)


@pytest.fixture
def fs(live_server, settings):
    settings.FAIRSCHED_API_RATE = 0.0
    make_workflow("code")
    acme = producer(make_org("Acme"))
    return api_client.Fairsched(live_server.url, acme.raw, max_wait=3)


def test_the_client_submits_reads_pages_and_cancels(fs):
    chart = fs.submit(workflow="code", payload={"seconds": 1}, external_id="mrn-1")
    assert fs.chart(chart["id"])["external_id"] == "mrn-1"
    batch = fs.submit_batch([{"workflow": "code", "external_id": f"b-{i}"} for i in range(5)])
    assert batch["created"] == 5
    assert len(list(fs.charts())) == 6
    assert fs.cancel(chart["id"])["state"] == "cancelled"
    assert fs.status()["org"]["slug"] == "acme"
    with pytest.raises(api_client.ApiError) as exc:
        fs.submit_batch([{"workflow": "code"}, {"workflow": "nope"}])
    assert exc.value.status == 422 and list(exc.value.errors) == ["charts[1].workflow"]


def test_the_client_waits_retry_after_and_submits_once(fs, redis_url, settings):
    settings.FAIRSCHED_API_RATE, settings.FAIRSCHED_API_BURST = 1.0, 1
    fs.submit(workflow="code")  # takes the one token
    t0 = time.monotonic()
    fs.submit(workflow="code")  # 429, Retry-After: 1, then created
    assert time.monotonic() - t0 >= 0.9
    assert Chart.objects.count() == 2
