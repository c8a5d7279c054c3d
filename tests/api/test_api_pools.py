"""The producer API with capacity pools (issue 43, "Visible everywhere"): a chart's read says
why it waits for a pool or at its org's ceiling (``waits``), and a blocked chart's ``no_eta``
names the pool with no room for it. Pools set up through their services; the snapshot is the
scheduler's own (dashboard.simulate.publish_from_db)."""
from __future__ import annotations

import pytest

from control.services import pool_set
from dashboard.simulate import publish_from_db
from tests.api.conftest import producer
from tests.factories import make_pooled_world


@pytest.fixture
def pooled(db, settings):
    settings.FAIRSCHED_API_RATE = 0.0
    return make_pooled_world()


def test_a_chart_read_says_why_it_waits_for_a_pool_or_a_ceiling(pooled, redis_url):
    beta, acme = producer(pooled["beta"], "read"), producer(pooled["acme"], "read")
    b1 = beta.get(f"/charts/{pooled['b1'].pk}").json()
    assert b1["waits"] is None and b1["no_eta"] == "waiting for the scheduler's next pass to place it"
    publish_from_db()
    b1 = beta.get(f"/charts/{pooled['b1'].pk}").json()
    assert b1["waits"] == "waiting for pool llm (2 of 2 in use)"
    assert b1["position"] is not None and b1["eta"] is not None and b1["no_eta"] is None
    b2 = beta.get(f"/charts/{pooled['b2'].pk}").json()
    assert b2["position"] is None and b2["eta"] is None
    assert b2["no_eta"] == "blocked: pool gpu has no room for it: capacity 0"
    assert b2["waits"] == "pool gpu has no room for it: capacity 0"
    a1 = acme.get(f"/charts/{pooled['a1'].pk}").json()
    assert a1["waits"] == "at its ceiling in pool llm (1 of 1)" and a1["eta"] is not None
    listed = {c["external_id"]: c["waits"] for c in beta.get("/charts").json()["charts"]}
    assert listed == {"b-0": None, "b-1": "waiting for pool llm (2 of 2 in use)",
                      "b-2": "pool gpu has no room for it: capacity 0"}


def test_a_blocked_charts_reason_follows_the_pool(pooled, redis_url):
    beta = producer(pooled["beta"], "read")
    pool_set(name="gpu", capacity=3)
    pool_set(name="llm", capacity=5)
    publish_from_db()
    b2 = beta.get(f"/charts/{pooled['b2'].pk}").json()
    assert b2["waits"] is None and b2["no_eta"] is None and b2["eta"] is not None  # room now: it starts
    b1 = beta.get(f"/charts/{pooled['b1'].pk}").json()
    assert b1["waits"] is None


def test_without_pools_the_reasons_are_as_before(api_world, redis_url):
    acme = api_world["acme"]
    chart = acme.post("/charts", {"workflow": "code"}).json()
    publish_from_db()
    body = acme.get(f"/charts/{chart['id']}").json()
    assert body["waits"] is None and body["no_eta"] is None and body["position"] == 0
