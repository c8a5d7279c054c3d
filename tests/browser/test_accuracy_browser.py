"""The dashboard's ETA accuracy panel and an org page's own accuracy, in headless Chromium."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from playwright.sync_api import expect

from charts.models import ChartState
from tests.browser.conftest import ARTIFACTS, login
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def finished(db):
    wf = make_workflow("code")
    acme, beta = make_org("Acme"), make_org("Beta <b>")
    for org, n, err in ((acme, 6, -300.0), (beta, 4, 120.0)):
        for i in range(n):
            fin = T0 + timedelta(minutes=i)
            make_chart(org, wf, state=ChartState.SUCCEEDED, started_at=fin - timedelta(minutes=3), finished_at=fin,
                       eta_first_at=fin + timedelta(seconds=err), eta_dispatch_at=fin + timedelta(seconds=err / 2),
                       eta_p90_at=fin + timedelta(seconds=60 if i % 2 else -60))
    make_user("root", superuser=True)
    alice = make_user("alice")
    acme.members.add(alice)
    return {"acme": acme, "beta": beta}


def test_accuracy_panel_shows_figures_per_org_and_the_plot(browser, browser_server, redis_url, finished):
    base = browser_server
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    login(page, base, "root", then="/dashboard/")
    panel = page.locator("#accuracy")
    expect(panel.locator("#acc-n")).to_have_text("10", timeout=10_000)
    rows = panel.locator("#acc-body tr")
    expect(rows).to_have_count(3)  # all orgs, Acme, Beta
    expect(rows.nth(0)).to_contain_text("all orgs")
    acme = panel.locator(f'#acc-body tr[data-org="{finished["acme"].pk}"]')
    # Acme's charts finished 5 min after their first ETA (bias −5 min), 2.5 min after the one at dispatch
    expect(acme.locator("td")).to_have_text(["Acme", "6", "5.0 min", "5.0 min", "−5.0 min",
                                             "2.5 min", "2.5 min", "−2.5 min", "50%"])
    beta = panel.locator(f'#acc-body tr[data-org="{finished["beta"].pk}"]')
    expect(beta.locator("td").first).to_have_text("Beta <b>")  # a name is text, never markup
    expect(beta.locator("td").nth(4)).to_have_text("+2.0 min")
    # the predicted-vs-actual plot was drawn by Chart.js with both series
    page.wait_for_function("() => window.Chart && Chart.getChart('plot-accuracy') && "
                           "Chart.getChart('plot-accuracy').data.datasets[0].data.length === 10")
    assert page.evaluate("Chart.getChart('plot-accuracy').data.datasets[1].data.length") == 10
    panel.screenshot(path=str(ARTIFACTS / "accuracy-panel.png"))


def test_org_page_shows_its_own_accuracy(browser, browser_server, redis_url, finished):
    base = browser_server
    page = browser.new_context().new_page()
    login(page, base, "alice", then="/orgs/acme/")
    table = page.locator("#acc-org")
    expect(table.locator('tr[data-kind="first"] td')).to_have_text(["first ETA", "6", "5.0 min", "5.0 min",
                                                                    "−5.0 min"])
    expect(table.locator('tr[data-kind="dispatch"] td').nth(4)).to_have_text("−2.5 min")
    expect(page.locator("#accuracy")).to_contain_text("your last 6 finished charts")

def test_accuracy_panel_gives_both_due_warnings_recall_and_precision(browser, browser_server, redis_url, finished):
    from charts.models import Chart

    acme = list(Chart.objects.filter(org=finished["acme"]).order_by("finished_at"))
    for i, chart in enumerate(acme):  # the first two missed their due time, the other four met it
        due = chart.finished_at + (timedelta(minutes=-1) if i < 2 else timedelta(minutes=10))
        Chart.objects.filter(pk=chart.pk).update(
            due_at=due, due_flagged_at=due - timedelta(hours=3) if i < 3 else None,  # early: 2 missed + 1 met
            due_late_at=due - timedelta(hours=2) if i == 0 else None)              # late: 1, which missed
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    login(page, browser_server, "root", then="/dashboard/")
    expect(page.locator("#acc-due")).to_have_text(
        "Due warnings, last 6 finished charts with a due time: 2 missed. Late warning (ETA after the due time): "
        "recall 50% (missed charts warned at least 1.0 h ahead), precision 100% (of 1 warned, the share that "
        "missed); median lead 2.0 h. Early warning (at risk or late): recall 100%, precision 67% (of 3 warned); "
        "median lead 3.0 h.", timeout=10_000)
    page.locator("#accuracy").screenshot(path=str(ARTIFACTS / "accuracy-due-warnings.png"))
