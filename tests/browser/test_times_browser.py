"""Times as a new user reads them in Chromium: a running chart past its expected finish
says how long it is overdue (never "now" for ever)."""
from __future__ import annotations

import re
from datetime import timedelta

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
