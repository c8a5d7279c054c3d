"""The dashboard under a demo workload: renders without a JavaScript error, draws its
plots, and leaves a screenshot (var/test-artifacts/dashboard.png; also
docs/dashboard.png for the README when FAIRSCHED_UPDATE_SCREENSHOT=1)."""
from __future__ import annotations

import json
import os
import random
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from charts.models import Chart, ChartState, DurationStat
from dashboard.selectors import HISTORY_KEY
from control.models import SchedulerSettings
from common.notify import redis_client
from tests.browser.conftest import ARTIFACTS, ROOT, SETTLE_JS, login, settle
from tests.factories import make_cost, make_org, make_user, make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ORGS = [  # name, weight, queued, running, paused
    ("Northwind Health", 3, 420, 3, 0),
    ("Acme Clinics", 2, 160, 2, 2),
    ("Beta Labs", 1, 45, 1, 0),
    ("Cedar Care", 0, 30, 0, 0),  # held
    ("Delta Medical", 1, 12, 1, 3),
    ("Echo Imaging", 1, 6, 0, 0),
]


def demo_workload() -> None:
    rng = random.Random(7)
    now = timezone.now()
    SchedulerSettings.objects.update_or_create(pk=1, defaults={"budget": 12})
    wfs = {"code": make_workflow("code"), "review": make_workflow("review"), "audit": make_workflow("audit")}
    rows = []
    for name, weight, queued, running, paused in ORGS:
        org = make_org(name, weight=weight)
        make_cost(org, wfs["review"], 2)
        make_cost(org, wfs["audit"], 3 if name != "Echo Imaging" else 20)  # 20 > budget: blocked
        prefix = "".join(w[0] for w in name.split()).lower()
        for wf_name, avg in (("code", 540), ("review", 900), ("audit", 1500)):
            mean = avg * rng.uniform(.8, 1.2)
            DurationStat.objects.create(org=org, workflow=wfs[wf_name], count=20, total_s=20 * mean, mean_s=mean)
        DurationStat.objects.create(org=org, workflow=None, count=60, total_s=60 * 800, mean_s=800)
        for i in range(queued):
            wf = "code" if name == "Echo Imaging" else rng.choices(["code", "review", "audit"], [6, 3, 1])[0]
            rows.append(Chart(org=org, workflow=wfs[wf], external_id=f"{prefix}-{1000 + i}",
                              created_at=now - timedelta(minutes=90) + timedelta(seconds=i * 7 + rng.random()),
                              paused=i < paused))
        for i in range(running):
            started = now - timedelta(seconds=rng.uniform(60, 900))
            rows.append(Chart(org=org, workflow=wfs["code"], external_id=f"{prefix}-{900 + i}", state=ChartState.RUNNING,
                              created_at=started - timedelta(minutes=30), dispatched_at=started, started_at=started,
                              dispatched_cost=1))
        for i in range(14):  # finished over the last hour
            started = now - timedelta(minutes=rng.uniform(5, 60))
            took = timedelta(seconds=540 * rng.uniform(.6, 1.5))
            rows.append(Chart(org=org, workflow=wfs["code"], external_id=f"{prefix}-{800 + i}",
                              state=ChartState.SUCCEEDED, created_at=started - timedelta(minutes=20),
                              started_at=started, dispatched_at=started, finished_at=min(now, started + took),
                              dispatched_cost=1))
    Chart.objects.bulk_create(rows)
    Chart.objects.filter(external_id="ei-1003").update(workflow=wfs["audit"])  # Echo's blocked chart


def demo_history(org_ids: dict[str, int]) -> None:
    """Half an hour of queue depth (one point per 30 s ETA pass), ending at today's depth."""
    client = redis_client()
    now = time.time()
    client.delete(HISTORY_KEY)
    for k in range(60, 0, -1):
        q = {}
        for name, weight, queued, _, _ in ORGS:
            drain = 0.0 if weight == 0 else 0.45 * weight
            q[str(org_ids[name])] = int(queued + drain * k + (8 if name == "Beta Labs" and k < 25 else 0))
        client.rpush(HISTORY_KEY, json.dumps({"t": now - 30 * k, "q": q, "r": 7}))


def test_dashboard_under_a_demo_workload(browser, browser_server, redis_layer_publish):
    from orgs.models import Org

    demo_workload()
    make_user("root", superuser=True)
    demo_history({o.name: o.pk for o in Org.objects.all()})
    redis_layer_publish()
    context = browser.new_context(viewport={"width": 1480, "height": 1100}, device_scale_factor=1)
    context.add_init_script(SETTLE_JS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, browser_server, "root", then="/dashboard/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    expect(page.locator("#order-body tr[data-chart-id]")).to_have_count(100)
    expect(page.locator("[data-counter=held]")).to_have_text("30")
    expect(page.locator("[data-counter=blocked]")).to_have_text("1")
    expect(page.locator("#running-body tr")).to_have_count(7)
    temporal = page.locator("#running-body a").first
    assert "/namespaces/default/workflows/chart-" in temporal.get_attribute("href")
    page.locator("#order-next").click()
    total = sum(o[2] for o in ORGS)
    expect(page.locator("#order-range")).to_contain_text(f"101–200 of {total}")
    page.locator("#order-prev").click()
    expect(page.locator("#order-range")).to_contain_text(f"1–100 of {total}")
    settle(page)  # plots fetched and drawn (unanimated), ETAs ticked (on every message)
    assert errors == []
    # Idle, it animates nothing: the running charts' bars move once a second, without a
    # transition (one of 0.9 s on each bar's width kept Chromium at half a core, idle).
    page.wait_for_timeout(1100)  # a tick of the clock has moved the bars
    running = "document.getAnimations().map((a) => a.constructor.name + ' ' + (a.transitionProperty || a.animationName))"
    seen = []
    for _ in range(6):  # over a second: a 0.9 s transition each second would be caught
        page.wait_for_timeout(170)
        seen.append(page.evaluate(running))
    assert seen == [[]] * 6
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("FAIRSCHED_UPDATE_SCREENSHOT") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "docs" / "dashboard.png")
    assert Path(shot).stat().st_size > 20_000
