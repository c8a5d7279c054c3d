"""Chromium: the dashboard's Due panel from what the scheduler's reader publishes: the counts
per org, the charts at risk or late least slack first with why, "Prioritise at risk" (the
control, audited), and no accessibility violation of its own (axe-core, WCAG 2 A and AA)."""
from __future__ import annotations

import os
import shutil
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from charts.models import Chart
from common import snapshot
from control.models import AuditEntry
from orgs.services import org_set_turnaround
from tests.browser import axe
from tests.browser.conftest import ARTIFACTS, ROOT, login
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _world() -> dict:
    code = make_workflow("code")
    now = timezone.now()
    acme, beta, cedar = make_org("Acme"), make_org("Beta"), make_org("Cedar", weight=0)  # Cedar held
    org_set_turnaround(org=acme, turnaround=3600)
    late = [make_chart(acme, code, created_at=now - timedelta(hours=2, minutes=i)) for i in range(3)]  # due passed
    on_time = [make_chart(beta, code, due_at=now + timedelta(days=2), due_explicit=True) for _ in range(2)]
    held = make_chart(cedar, code, due_at=now + timedelta(hours=5), due_explicit=True)  # no ETA: at risk
    return {"acme": acme, "beta": beta, "cedar": cedar, "late": late, "on_time": on_time, "held": held}


def test_the_due_panel_counts_lists_by_slack_prioritises_and_adds_no_violation(
        browser, browser_server, redis_layer_publish):
    w = _world()
    make_user("root", superuser=True)
    redis_layer_publish()
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    login(page, browser_server, "root", then="/dashboard/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    expect(page.locator("#due-body")).to_be_visible()
    expect(page.locator("#due-empty")).to_be_hidden()
    expect(page.locator("#due-summary")).to_have_text("1 at risk · 3 late · 2 on time")

    def org_row(org):
        return page.locator(f"#due-orgs-body tr[data-org-id='{org.pk}']").locator("td")

    expect(org_row(w["acme"])).to_have_text(["Acme", "0", "0", "3", "Prioritise at risk"])
    expect(org_row(w["beta"])).to_have_text(["Beta", "2", "0", "0", ""])
    expect(org_row(w["cedar"])).to_have_text(["Cedar", "0", "1", "0", "Prioritise at risk"])
    # the charts at risk or late, least slack first (Cedar's, without an ETA, by its time left)
    listed = snapshot.read_snapshot()["due"]["charts"]
    keys = [r["slack_s"] if r["slack_s"] is not None else r["due_s"] for r in listed]
    assert keys == sorted(keys) and {r["id"] for r in listed} == {c.pk for c in w["late"]} | {w["held"].pk}
    rows = page.locator("#due-charts-body tr")
    expect(rows).to_have_count(4)
    expect(rows.locator("td:first-child")).to_have_text([f"#{r['id']}" for r in listed])
    expect(rows.nth(0).locator(".badge")).to_have_text("late")
    expect(rows.nth(0).locator("td").last).to_have_text("ETA after the due time")
    expect(rows.nth(3).locator("td").first).to_have_text(f"#{w['held'].pk}")
    expect(rows.nth(3).locator(".badge")).to_have_text("at risk")
    expect(rows.nth(3).locator("td").nth(4)).to_have_text("no ETA")
    expect(rows.nth(3).locator("td").last).to_have_text("held: no ETA")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#due-panel").screenshot(path=str(ARTIFACTS / "due-panel.png"))
    if os.environ.get("FAIRSCHED_UPDATE_SCREENSHOT") == "1":  # docs/due-panel.png, for the README
        shutil.copy(ARTIFACTS / "due-panel.png", ROOT / "docs" / "due-panel.png")
    found = axe.violations(page, within="#due-panel")
    assert not found, "axe-core found violations in the Due panel:\n" + axe.report({"Due panel": found})
    # the check sees the panel: a faint text put into it is found
    page.evaluate("""() => { const p = document.createElement("p"); p.id = "due-control"; p.textContent = "faint";
                             p.style.color = "#bbb"; p.style.background = "#fff";
                             document.getElementById("due-panel").appendChild(p); }""")
    assert any(v["id"] == "color-contrast" for v in axe.violations(page, within="#due-panel"))

    # the lever: Acme's late charts go to the priority tier, audited
    org_row(w["acme"]).get_by_role("button", name="Prioritise at risk: Acme, its at-risk and late charts").click()
    for _ in range(50):
        if Chart.objects.filter(pk__in=[c.pk for c in w["late"]], priority=True).count() == 3:
            break
        page.wait_for_timeout(100)
    assert Chart.objects.filter(pk__in=[c.pk for c in w["late"]], priority=True).count() == 3
    assert not Chart.objects.filter(pk__in=[c.pk for c in w["on_time"]], priority=True).exists()
    assert AuditEntry.objects.filter(action__icontains="prioriti").exists()
