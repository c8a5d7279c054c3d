"""A real scheduler answers a what-if preview (its forked children, over Redis), and applying
the change gives, at its next pass, the clear-times the preview showed, within the ETA
model's own run-to-run change."""
from __future__ import annotations

from datetime import datetime

import pytest
from django.test import Client

from charts.models import Chart, ChartState
from common import snapshot
from control.models import AuditEntry
from control.services import scheduler_settings_set
from orgs.services import org_set_weight
from tests.factories import make_chart, make_org, make_user, make_workflow
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _t(iso: str | None) -> float | None:
    return None if iso is None else datetime.fromisoformat(iso).timestamp()


def _clears(snap: dict) -> dict[str, float | None]:
    return {str(o["id"]): _t(o["clear_at"]) for o in snap["orgs"]}


def test_a_live_preview_then_the_change_gives_its_clear_times(live):
    # Budget 1 and no worker: the first chart runs (and never finishes), the rest wait: a still state.
    scheduler_settings_set(budget=1, eta_interval_s=0.5, reconcile_interval_s=1.0)
    wf = make_workflow("code", temporal_type="DemoChart")
    acme, beta = make_org("Acme"), make_org("Beta")
    for i in range(12):
        make_chart(acme if i % 3 else beta, wf, payload={"seconds": 60})
    client = Client()
    client.force_login(make_user("op", staff=True, perms=("charts.view_chart",)))
    live.scheduler()
    wait_until(lambda: Chart.objects.filter(state=ChartState.RUNNING).count() == 1, timeout=60, what="one running")
    wait_until(lambda: (snapshot.read_snapshot() or {}).get("counters", {}).get("running") == 1, timeout=30,
               what="a snapshot with it running")
    audits = AuditEntry.objects.count()

    r = wait_until(lambda: (lambda r: r if r.status_code == 200 else None)(
        client.get(f"/dashboard/whatif.json?org={beta.pk}&weight=4")), timeout=30, what="a preview answered")
    body = r.json()
    assert body["change"] == {"kind": "weight", "org": beta.pk, "value": 4}
    b, a = body["orgs"][str(beta.pk)], body["orgs"][str(acme.pk)]
    assert _t(b["clear_after"]) < _t(b["clear_before"])  # heavier: Beta's charts go sooner, Acme's later
    assert _t(a["clear_after"]) > _t(a["clear_before"])
    before_snap = snapshot.read_snapshot()
    # the change moves Beta's clear-time by more than the tolerance: the check below can fail
    assert _t(b["clear_before"]) - _t(b["clear_after"]) > 2 * _tolerance(before_snap, str(beta.pk))
    for org, row in body["orgs"].items():  # "before" is what the scheduler publishes now
        assert abs(_t(row["clear_before"]) - _clears(before_snap)[org]) <= _tolerance(before_snap, org)
    assert AuditEntry.objects.count() == audits  # a preview is never audited

    org_set_weight(org=beta, weight=4)
    seq = before_snap["seq"]
    after_snap = wait_until(lambda: (lambda s: s if s and s["seq"] > seq and next(
        o for o in s["orgs"] if o["id"] == beta.pk)["weight"] == 4 else None)(snapshot.read_snapshot()),
        timeout=30, what="the next pass with the new weight")
    for org, row in body["orgs"].items():
        assert abs(_t(row["clear_after"]) - _clears(after_snap)[org]) <= _tolerance(after_snap, org), (org, row)


def _tolerance(snap: dict, org: str) -> float:
    """The model's run-to-run change: the time that passed between the preview and the pass
    (the running chart's remaining time and the phantoms' arrivals move with now), plus 5%
    of the time to clear (the forecast's phantom arrivals are recomputed with every pass)."""
    clear = _clears(snap)[org] or 0.0
    return 30.0 + 0.05 * max(0.0, clear - snap["now"])
