"""Pages about one chart read that chart's published fields, never the whole order.

A queued chart's page (``/charts/<id>/``) and ``status.json?external_id=`` used to read
every page of the order (or of the org): about 16 MB of JSON at 100k queued, under a
process-wide lock, for a page any org member may load. They now read the snapshot's
per-chart fields (``c:<id>``, ``x:<org>:<external id>``, ``common/snapshot.py``) and
must show exactly what the whole order says.
"""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from charts.models import Chart, ChartState
from common import snapshot as snap
from charts import selectors as chart_selectors
from dashboard import selectors
from dashboard.simulate import publish_from_db
from control.models import SchedulerSettings
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db

QUEUED = 520  # more than a page (snap.PAGE_ROWS): the chart looked for is on the org's second page


@pytest.fixture
def backlog(db, redis_url):
    """Acme: 520 queued charts (one paused) and one running; Beta: 5 queued; a budget of 2, so
    most charts wait (their start and finish are later than now)."""
    s = SchedulerSettings.get()
    s.budget = 2
    s.save()
    wf = make_workflow("code")
    acme, beta = make_org("Acme"), make_org("Beta")
    start = timezone.now() - timedelta(hours=1)
    Chart.objects.bulk_create([Chart(org=acme, workflow=wf, external_id=f"a-{i}",
                                     created_at=start + timedelta(seconds=i)) for i in range(QUEUED)])
    Chart.objects.bulk_create([Chart(org=beta, workflow=wf, external_id=f"b-{i}",
                                     created_at=start + timedelta(seconds=i)) for i in range(5)])
    running = make_chart(acme, wf, external_id="a-running", state=ChartState.RUNNING,
                         dispatched_at=timezone.now() - timedelta(seconds=5),
                         started_at=timezone.now() - timedelta(seconds=5))
    Chart.objects.filter(external_id="a-7").update(paused=True)
    member = make_user("m")
    acme.members.add(member)
    publish_from_db()
    return {"acme": acme, "beta": beta, "member": member, "running": running}


class Reads:
    """Counts the whole-order and whole-org reads and records the page-hash fields read."""

    def __init__(self, monkeypatch):
        self.whole_order = 0
        self.whole_org = 0
        self.fields: list[str] = []
        real_all, real_org, real_fields = snap.read_order_all, snap.read_org, snap._fields

        def read_order_all(*a, **kw):
            self.whole_order += 1
            return real_all(*a, **kw)

        def read_org(org_id, offset=0, limit=None, snapshot=None):
            if limit is None:
                self.whole_org += 1
            return real_org(org_id, offset, limit, snapshot=snapshot)

        def fields(s, names):
            self.fields += names
            return real_fields(s, names)

        monkeypatch.setattr(snap, "read_order_all", read_order_all)
        monkeypatch.setattr(snap, "read_org", read_org)
        monkeypatch.setattr(snap, "_fields", fields)
        selectors.clear_caches()


def _expected_live(chart_id: int) -> dict:
    """What the chart's page showed when it read the whole order: its row's place and times."""
    s = chart_selectors.read_live_snapshot()
    row = next(r for r in snap.read_order_all(s) if r["id"] == chart_id)
    base = s["now"]

    def at(v):
        return None if v is None else datetime.fromtimestamp(base + v, tz=timezone.get_current_timezone())
    return {"pos": row["pos"], "state": row["state"], "start": at(row["start_s"]), "finish": at(row["finish_s"]),
            "due_state": row.get("due_state"), "slack_s": row.get("slack_s"), "waits": None}  # no pools here


@pytest.mark.parametrize("which", ["a-510", "a-0", "a-7", "b-4"], ids=["deep", "head", "paused", "other-org"])
def test_a_queued_charts_page_shows_its_place_without_reading_the_whole_order(backlog, monkeypatch, which):
    chart = Chart.objects.get(external_id=which)
    want = _expected_live(chart.pk)
    assert which == "a-7" or want["finish"] is not None
    reads = Reads(monkeypatch)
    c = Client()
    c.force_login(backlog["member"] if which != "b-4" else make_user("root", superuser=True))
    resp = c.get(f"/charts/{chart.pk}/")
    assert resp.status_code == 200
    assert resp.context["prediction"]["live"] == want
    assert reads.whole_order == 0 and reads.whole_org == 0
    assert not [f for f in reads.fields if f.startswith(("o:", "g:"))], reads.fields  # its own field only
    text = resp.content.decode()
    assert (f"{want['pos'] + 1} in the order" in text) if want["pos"] is not None else "paused (set aside)" in text


def _old_answer(org, external_id: str) -> list[dict]:
    """status.json?external_id= as it was computed from every page of the org."""
    s = chart_selectors.read_live_snapshot()
    rows = snap.read_org(org.pk, snapshot=s)["charts"]
    source = chart_selectors.estimate_sources(org)
    return [chart_selectors.org_chart(r, s["now"], source) for r in rows if r.get("external_id") == external_id]


@pytest.mark.parametrize("external_id,page", [("a-510", 1), ("a-3", 0), ("a-running", 1), ("nope", None),
                                              ("b-1", None)],
                         ids=["deep", "first-page", "running", "unknown", "other-orgs"])
def test_status_json_by_external_id_reads_only_that_charts_page(backlog, monkeypatch, external_id, page):
    acme = backlog["acme"]
    want = _old_answer(acme, external_id)
    assert len(want) == (0 if page is None else 1)
    reads = Reads(monkeypatch)
    c = Client()
    c.force_login(backlog["member"])
    data = c.get("/orgs/acme/status.json", {"external_id": external_id}).json()
    assert data["charts"] == want and data["total"] == len(want) and data["source"] == "scheduler"
    assert reads.whole_order == 0 and reads.whole_org == 0
    pages = sorted(f for f in reads.fields if f.startswith(f"g:{acme.pk}:"))
    assert pages == ([] if page is None else [f"g:{acme.pk}:{page}"])
    # The org's own row still comes with it.
    assert data["org"]["queued"] == QUEUED and data["org"]["running"] == 1


def test_a_snapshot_without_the_index_still_answers_by_external_id(backlog, monkeypatch):
    """A snapshot stored before the per-org index (an older scheduler, during an upgrade) is
    answered the old way, never with "no such chart"."""
    s = chart_selectors.read_live_snapshot()
    pages = {k: v for k, v in s["pages"].items() if k != "by_external_id"}
    monkeypatch.setattr(chart_selectors, "read_snapshot_with_age", lambda: ({**s, "pages": pages}, 0.0, False))
    want = _old_answer(backlog["acme"], "a-510")
    c = Client()
    c.force_login(backlog["member"])
    assert c.get("/orgs/acme/status.json", {"external_id": "a-510"}).json()["charts"] == want


def test_every_charts_own_fields_equal_its_row_of_the_whole_order(redis_url):
    """Over a backlog of several pages per org (paused, held, blocked and running charts
    included, as the scheduler publishes them): ``c:<id>`` and the external-id index give
    exactly the rows the whole order and the whole org give."""
    import json

    from fairsched.engine.publish import build_snapshot
    from fairsched.engine.state import LiveState
    from tests.test_scale import T0, world

    live = LiveState(world(1234))
    now = T0 + 500
    built, rows, per_org = build_snapshot(live, live.capture().eta_report(now), now)
    snap.store(built, rows, per_org)
    rows = json.loads(json.dumps(rows, default=list))
    per_org = json.loads(json.dumps(per_org, default=list))
    places = snap.read_charts([r["id"] for r in rows])
    assert places == {r["id"]: {k: r.get(k) for k in ("pos", "state", "finish_s", "start_s", "p90_s", "due_s",
                                                      "due_state", "slack_s")} for r in rows}
    for org, data in per_org.items():
        for i, r in enumerate(data["charts"]):
            if r.get("external_id"):
                got = snap.read_org_external_id(int(org), r["external_id"])
                assert got["charts"] == [r] and got["total"] == len(data["charts"]), (org, i)
        assert snap.read_org_external_id(int(org), "no-such-id")["charts"] == []


def test_the_external_id_index_lists_every_place_of_an_id_an_org_repeats():
    """The index holds an id's one place as it finds it and makes a list from its second:
    each field is the id's places in the org's rows, in order, however many."""
    import json

    charts = [{"id": i, "external_id": ext} for i, ext in enumerate(["a", "b", "a", None, "c", "a", "", "b"])]
    fields = {name: json.loads(data) for name, data in snap.page_fields([], {7: {"org": {"id": 7}, "charts": charts}})
              if name.startswith("x:")}
    assert fields == {"x:7:a": [0, 2, 5], "x:7:b": [1, 7], "x:7:c": [4]}
