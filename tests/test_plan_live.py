"""``manage.py plan --live`` and ``--dump`` on a real database: the worked example built with
the ORM plans to the contract's order, and a plan of the dump agrees exactly with the live plan.
The live plan runs as a real process on the test database; the dump and its replay in this
process (tests/cli.py: the same entry point, without a Django start-up each)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.cli import manage as run
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import database_url

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.django_db(transaction=True)


def manage(*args: str, redis_url: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": redis_url}
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_live_plan_of_the_worked_example_and_its_dump_agree(redis_url):
    from control.models import SchedulerSettings

    s = SchedulerSettings.get()
    s.budget = 3
    s.save()
    one, two, three = make_org("one", weight=2), make_org("two"), make_org("three")
    wf = make_workflow("code")
    t = lambda minute: datetime(2026, 11, 29, 11, minute, tzinfo=timezone.utc)  # noqa: E731
    names = {}
    for name, org, minute in [("A", one, 0), ("B", one, 1), ("C", two, 2), ("D", one, 3),
                              ("E", two, 4), ("F", three, 5), ("G", one, 6)]:
        names[str(make_chart(org, wf, created_at=t(minute)).pk)] = name

    live = manage("plan", "--live", redis_url=redis_url)
    assert live.returncode == 0, live.stderr
    live_plan = json.loads(live.stdout)
    assert [names[i] for i in live_plan["order"]] == ["A", "B", "C", "F", "D", "E", "G"]
    assert [names[i] for i in live_plan["dispatch"]] == ["A", "B", "C"]

    dump = run("plan", "--dump")
    assert dump.returncode == 0, dump.stderr
    replay = run("plan", "-", stdin=dump.stdout)
    assert replay.returncode == 0, replay.stderr
    replay_plan = json.loads(replay.stdout)
    assert replay_plan["order"] == live_plan["order"] and replay_plan["dispatch"] == live_plan["dispatch"]
    assert replay_plan["clear_s"] == pytest.approx(live_plan["clear_s"], abs=1.0)  # "now" moved between runs
