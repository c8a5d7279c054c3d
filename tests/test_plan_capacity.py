"""``manage.py plan --live --clear-by ISO`` / ``--meet-due``: the capacity planner over the
database's state; bad input exits 2 naming the flag. In this process (tests/cli.py), but for
one bad input run as a real process, for its exit status."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from orgs.services import org_set_turnaround
from tests.factories import make_chart, make_org, make_workflow
from tests.cli import manage
from tests.test_plan_live import manage as manage_process

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("args, flag", [
    (["--live", "--clear-by", "tomorrow"], "--clear-by"), (["--clear-by", "2030-01-01T00:00:00Z"], "--live"),
    (["--live", "--clear-by", "2001-01-01T00:00:00Z"], "--clear-by"),
    (["--live", "--clear-by", "2030-01-01T00:00:00Z", "--meet-due"], "--meet-due"),
])
def test_bad_input_exits_2_naming_the_flag(redis_url, args, flag):
    out = manage("plan", *args)
    assert out.returncode == 2 and flag in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_bad_input_exits_2_from_a_real_process(redis_url):
    out = manage_process("plan", "--live", "--clear-by", "tomorrow", redis_url=redis_url)
    assert out.returncode == 2 and "--clear-by" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_the_smallest_budget_that_clears_by_a_time_and_keeps_the_due_times(redis_url):
    wf = make_workflow("code")
    acme = make_org("Acme")
    org_set_turnaround(org=acme, turnaround=3 * 3600)
    for _ in range(20):
        make_chart(acme, wf)
    far = (timezone.now() + timedelta(days=30)).isoformat()
    out = manage("plan", "--live", "--clear-by", far)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["budget"] == 1
    # Each chart is estimated at 600 s: no budget clears them within 5 minutes (far enough ahead
    # that the command, started on a loaded machine, still reads it as the future).
    soon = (timezone.now() + timedelta(seconds=300)).isoformat()
    none = json.loads(manage("plan", "--live", "--clear-by", soon).stdout)
    assert none["budget"] is None and "no budget up to 100,000" in none["message"]
    due = json.loads(manage("plan", "--live", "--meet-due").stdout)
    assert due["goal"] == "meet_due" and due["budget"] is not None and due["late"] == 0
