"""Times as a new user reads them in Chromium: a running chart past its expected finish
says how long it is overdue (never "now" for ever), and the accuracy plot's time axes are
24 h clock times, each label once."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone as tz

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from charts.models import ChartState, DurationStat
from tests.browser.conftest import login
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def running(db):
    wf = make_workflow("code")
    acme = make_org("Acme")
    DurationStat.objects.create(org=acme, workflow=wf, count=20, total_s=20 * 600, mean_s=600)  # 10 min expected
    now = timezone.now()
    late = make_chart(acme, wf, external_id="late", state=ChartState.RUNNING, dispatched_cost=1,
                      started_at=now - timedelta(minutes=25), dispatched_at=now - timedelta(minutes=25))
    on_time = make_chart(acme, wf, external_id="on-time", state=ChartState.RUNNING, dispatched_cost=1,
                         started_at=now - timedelta(minutes=2), dispatched_at=now - timedelta(minutes=2))
    make_chart(acme, wf, external_id="queued")
    make_user("root", superuser=True)
    alice = make_user("alice")
    acme.members.add(alice)
    return {"acme": acme, "late": late, "on_time": on_time}


def test_a_running_chart_past_its_expected_finish_says_how_long_it_is_overdue(browser, browser_server,
                                                                              redis_layer_publish, running):
    redis_layer_publish()
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    login(page, browser_server, "root", then="/dashboard/")
    late = page.locator(f'#running-body tr[data-chart-id="{running["late"].pk}"] td[data-eta]')
    expect(late).to_have_text(re.compile(r"^overdue by 1[45] min"), timeout=10_000)  # 25 min running, 10 expected
    expect(late).to_have_class(re.compile("overdue"))
    on_time = page.locator(f'#running-body tr[data-chart-id="{running["on_time"].pk}"] td[data-eta]')
    expect(on_time).to_have_text(re.compile(r"^in [78] min"))
    expect(on_time).not_to_have_class(re.compile("overdue"))

    # the org page, as a member sees it
    member = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    login(member, browser_server, "alice", then=f"/orgs/{running['acme'].slug}/")
    expect(member.locator("[data-live]")).to_have_attribute("data-state", "live", timeout=10_000)
    late = member.locator(f'tr[data-chart-id="{running["late"].pk}"] td[data-eta]')
    expect(late).to_have_text(re.compile(r"^overdue by 1[45] min"))
    expect(member.locator(f'tr[data-chart-id="{running["on_time"].pk}"] td[data-eta]')).to_have_text(
        re.compile(r"^in [78] min"))


T0 = datetime(2026, 1, 5, 19, 40, tzinfo=tz.utc)


@pytest.fixture
def finished(db):
    wf = make_workflow("code")
    acme = make_org("Acme")
    for i in range(12):  # finishes 40 s apart over 8 minutes: a short axis, where minutes repeated
        fin = T0 + timedelta(seconds=40 * i)
        make_chart(acme, wf, state=ChartState.SUCCEEDED, started_at=fin - timedelta(minutes=3), finished_at=fin,
                   eta_first_at=fin + timedelta(seconds=90), eta_dispatch_at=fin - timedelta(seconds=30))
    make_user("root", superuser=True)


@pytest.mark.parametrize("locale", ["en-US", "en-GB"])
def test_the_accuracy_plot_labels_its_time_axes_in_24_h_each_label_once(browser, browser_server, redis_url,
                                                                         finished, locale):
    page = browser.new_context(viewport={"width": 1440, "height": 1000}, locale=locale,
                               timezone_id="Europe/Berlin").new_page()
    login(page, browser_server, "root", then="/dashboard/")
    page.wait_for_function("() => window.Chart && Chart.getChart('plot-accuracy') && "
                           "Chart.getChart('plot-accuracy').data.datasets[0].data.length === 12", timeout=10_000)
    for axis in ("x", "y"):
        labels = page.evaluate(f"Chart.getChart('plot-accuracy').scales.{axis}.ticks.map((t) => t.label)")
        assert len(labels) >= 3, labels
        # 24 h, no AM/PM; the first names its day (not today's): "Jan 5 20:40", "20:41", ...
        assert re.fullmatch(r"Jan 5 20:[34]\d", labels[0]), labels
        assert all(re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", label) for label in labels[1:]), labels
        assert len(set(labels)) == len(labels), f"a label repeats on the {axis} axis: {labels}"
    # Berlin is UTC+1 in January: the charts finished from 20:40 local time
    assert page.evaluate("Chart.getChart('plot-accuracy').scales.x.ticks.map((t) => t.label)")[0] == "Jan 5 20:40"
