"""axe-core (WCAG 2 A and AA) in Chromium on the pages a new user sees first, under the
demo workload: any violation fails, listed by rule, element and what to fix."""
from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db.models import F
from playwright.sync_api import expect

from charts.models import Chart, ChartState
from charts.services import chart_pause, chart_resume
from orgs.models import Org
from tests.browser import axe
from tests.browser.conftest import ARTIFACTS, login
from tests.browser.test_screenshot import demo_history, demo_workload
from tests.factories import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _demo() -> dict[str, object]:
    demo_workload()
    # the finished charts had predictions: the accuracy panel, its plot and the chart page's table fill in
    Chart.objects.filter(state=ChartState.SUCCEEDED).update(
        eta_first_at=F("finished_at") + timedelta(minutes=4), eta_dispatch_at=F("finished_at") - timedelta(minutes=1),
        eta_p90_at=F("finished_at") + timedelta(minutes=2))
    make_user("root", superuser=True)
    for chart in Chart.objects.filter(state=ChartState.QUEUED, paused=False).order_by("-pk")[:8]:  # the activity
        chart_pause(chart=chart.pk)                                                                  # feed scrolls
        chart_resume(chart=chart.pk)
    demo_history({o.name: o.pk for o in Org.objects.all()})
    acme = Org.objects.get(name="Acme Clinics")
    return {"org": acme, "finished": Chart.objects.filter(org=acme, state=ChartState.SUCCEEDED).first(),
            "queued": Chart.objects.filter(org=acme, state=ChartState.QUEUED, paused=False).first()}


@pytest.mark.slow(22)
def test_the_pages_have_no_accessibility_violation(browser, browser_server, redis_layer_publish):
    demo = _demo()
    redis_layer_publish()
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    login(page, browser_server, "root", then="/dashboard/")
    found: dict[str, list[dict]] = {}

    def check(name: str, path: str, ready: str) -> None:
        if page.url != browser_server + path:
            page.goto(browser_server + path)
        expect(page.locator(ready).first).to_be_attached(timeout=10_000)
        page.wait_for_timeout(300)  # the plots drawn, the clocks ticked
        found[name] = axe.violations(page)
        page.screenshot(path=str(ARTIFACTS / f"axe-{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}.png"),
                        full_page=True)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    check("dashboard", "/dashboard/", "#live[data-state=live]")
    expect(page.locator("#acc-body tr")).not_to_have_count(0)
    found["dashboard"] = axe.violations(page)  # again, with the accuracy panel loaded
    page.set_viewport_size({"width": 1920, "height": 1080})  # the wide layout: two columns of cards
    page.wait_for_timeout(300)
    found["dashboard (1920 px wide)"] = axe.violations(page)
    check("org page", f"/orgs/{demo['org'].slug}/", "[data-live][data-state=live]")
    for name in ("Cedar Care", "Echo Imaging"):  # held; one chart blocked
        check(f"org page ({name})", f"/orgs/{Org.objects.get(name=name).slug}/", "[data-live][data-state=live]")
    check("history", "/dashboard/history/", "table")
    check("chart page (finished)", f"/charts/{demo['finished'].pk}/", "#chart-prediction")
    check("chart page (queued)", f"/charts/{demo['queued'].pk}/", "#chart-facts")
    check("admin org list", "/admin/orgs/org/", "#result_list")
    (ARTIFACTS / "axe-violations.json").write_text(json.dumps(found, indent=1))
    # The control case: grey text on white is found, so a clean run above means something.
    page.evaluate("""() => { const p = document.createElement("p"); p.id = "axe-control"; p.textContent = "faint";
                             p.style.color = "#bbb"; p.style.background = "#fff"; document.body.appendChild(p); }""")
    control = axe.violations(page)
    assert any(v["id"] == "color-contrast" and any("#axe-control" in n["target"] for n in v["nodes"])
               for v in control), control
    assert not any(found.values()), "axe-core (WCAG 2 A, AA) found violations:\n" + axe.report(found)
