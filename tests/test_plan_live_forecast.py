"""``manage.py plan --live`` prints the ETAs of the model the live scheduler is set to, and names it.
(In this process, tests/cli.py; tests/test_plan_live.py runs ``plan --live`` as a real process.)"""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from charts.models import ChartState
from control.models import SchedulerSettings
from tests.factories import make_chart, make_org, make_workflow
from tests.cli import manage as run

pytestmark = pytest.mark.django_db(transaction=True)


def test_plan_live_uses_the_configured_eta_model(redis_url):
    s = SchedulerSettings.get()
    s.budget = 1
    s.save()
    big, small = make_org("big"), make_org("small")
    wf = make_workflow("code")
    now = timezone.now()
    back = [make_chart(big, wf, created_at=now - timedelta(minutes=59, seconds=i)) for i in range(8)]
    # small has sent a chart every 2 minutes for the last hour; all but the last one ran
    for i in range(30):
        make_chart(small, wf, created_at=now - timedelta(minutes=60 - 2 * i), state=ChartState.SUCCEEDED,
                   started_at=now - timedelta(minutes=59 - 2 * i), finished_at=now - timedelta(minutes=58 - 2 * i))
    make_chart(small, wf, created_at=now - timedelta(seconds=30))

    live = run("plan", "--live")
    assert live.returncode == 0, live.stderr
    fore = json.loads(live.stdout)
    assert fore["eta_model"] == "forecast"  # the default setting
    replay = json.loads(run("plan", "-", stdin=run("plan", "--dump").stdout).stdout)
    last = fore["order"][-1]
    assert last in {str(c.pk) for c in back}
    assert fore["order"] == replay["order"]
    # the lane simulation of the dump expects nothing more from small; the forecast expects
    # about one chart every 2 minutes, each taking a turn before big's later charts
    assert fore["etas"][last]["finish_s"] > replay["etas"][last]["finish_s"] + 300

    s.eta_model = "lanes"
    s.save()
    lanes = json.loads(run("plan", "--live").stdout)
    assert lanes["eta_model"] == "lanes"
    assert lanes["etas"][last]["finish_s"] == pytest.approx(replay["etas"][last]["finish_s"], abs=5.0)
    table = run("plan", "--live", "--table")
    assert table.returncode == 0 and "ETA model lanes" in table.stdout.splitlines()[0]
