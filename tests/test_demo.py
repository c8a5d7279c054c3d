"""The living demo: seed_demo sets up the situation of the README's demo; demo_load keeps charts arriving."""
from __future__ import annotations

import random
from collections import Counter

import pytest
from django.core.management import call_command

from charts.models import Chart, ChartState
from fairsched.management.commands.demo_load import LoadGenerator
from fairsched.management.commands.seed_demo import ORGS, WORKFLOWS
from control.models import SchedulerSettings
from orgs.models import Org, Workflow, WorkflowCost

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)  # on-commit notifications really fire
def test_seed_demo_builds_the_write_ups_situation(capture_notifications):
    call_command("seed_demo", stdout=open("/dev/null", "w"))

    per_org = Counter(Chart.objects.filter(state=ChartState.QUEUED).values_list("org__name", flat=True))
    assert per_org == {o.name: o.charts for o in ORGS}
    assert per_org["Acme Health"] == 1000 and all(n <= 40 for name, n in per_org.items() if name != "Acme Health")
    held = list(Org.objects.filter(weight=0).values_list("name", "weight_before_hold"))
    assert held == [("Evergreen Medical", 1)]
    assert list(Workflow.objects.order_by("name").values_list("name", "temporal_type")) == [
        ("audit", "DemoChart"), ("code", "DemoChart"), ("review", "DemoChart")]
    assert Chart.objects.filter(priority=True).count() == 4
    assert set(Chart.objects.filter(priority=True).values_list("workflow__name", flat=True)) == {"review"}
    assert WorkflowCost.objects.filter(cost__gt=1).count() >= 12
    assert sorted(set(WorkflowCost.objects.values_list("cost", flat=True))) == [2, 3, 4]
    assert SchedulerSettings.get().budget == 12
    # two pools beside the budget: coding draws on llm, auditing on both; Acme's ceiling in llm
    from control.models import Pool
    from orgs.models import OrgPoolLimit
    assert dict(Pool.objects.values_list("name", "capacity")) == {"llm": 8, "gpu": 4}
    drawn = {(o, w): p for o, w, p in WorkflowCost.objects.values_list("org__name", "workflow__name", "pools")}
    assert drawn[("Acme Health", "audit")] == {"default": 3, "gpu": 1, "llm": 2}
    assert drawn[("Cedar Labs", "code")] == {"default": 3, "llm": 1}
    assert ("Acme Health", "review") not in drawn  # cost 1 on the budget: no row
    assert list(OrgPoolLimit.objects.values_list("org__name", "pool", "max", "min")) == [("Acme Health", "llm", 4, 0)]

    ranges = {w.name: w.seconds for w in WORKFLOWS}
    used = Counter()
    for name, payload in Chart.objects.values_list("workflow__name", "payload"):
        low, high = ranges[name]
        assert low <= payload["seconds"] <= high
        used[name] += 1
    assert min(used.values()) > 50  # all three types are in the mix
    # each workflow declares what it runs: the first ETAs are right before any chart finished
    declared = dict(Workflow.objects.values_list("name", "expected_duration_s"))
    assert declared == {"review": 12, "code": 40, "audit": 120}
    for name, seconds in Workflow.objects.values_list("name", "expected_duration_s"):
        runs = [p["seconds"] for p in Chart.objects.filter(workflow__name=name).values_list("payload", flat=True)]
        assert abs(sum(runs) / len(runs) - seconds) < 0.1 * seconds
    assert 0 < Chart.objects.filter(payload__fail=True).count() < 60
    kinds = {n["kind"] for n in capture_notifications}
    assert {"charts", "org", "cost", "settings"} <= kinds  # it went through the services


def test_seed_demo_short_declares_the_short_charts_duration():
    call_command("seed_demo", "--short", "--scale", "0.02", stdout=open("/dev/null", "w"))
    assert set(Workflow.objects.values_list("expected_duration_s", flat=True)) == {3}
    assert all(1 <= p["seconds"] <= 5 for p in Chart.objects.values_list("payload", flat=True))


def test_seed_demo_runs_once():
    call_command("seed_demo", "--scale", "0.01", stdout=open("/dev/null", "w"))
    before = Chart.objects.count()
    call_command("seed_demo", "--if-empty", stdout=open("/dev/null", "w"))
    assert Chart.objects.count() == before
    with pytest.raises(Exception, match="exist already"):
        call_command("seed_demo", stdout=open("/dev/null", "w"))


def test_demo_load_submits_to_orgs_that_are_not_held_and_pauses_when_full():
    call_command("seed_demo", "--scale", "0.02", stdout=open("/dev/null", "w"))
    queued = Chart.objects.filter(state=ChartState.QUEUED).count()
    gen = LoadGenerator(rate_per_min=60, max_queued=queued + 200, rng=random.Random(1))
    charts = [gen.tick() for _ in range(200)]
    assert all(c is not None for c in charts)
    orgs = Counter(c.org.name for c in charts)
    assert "Evergreen Medical" not in orgs
    assert orgs.most_common(1)[0][0] == "Acme Health" and 70 < orgs["Acme Health"] < 130
    assert all(c.external_id.startswith("load-") and "seconds" in c.payload for c in charts)
    assert gen.tick() is None  # max_queued reached
    assert 0.5 < sum(gen.next_delay() for _ in range(2000)) / 2000 < 1.5  # about one a second at 60/min


def test_demo_load_command_stops_after_count():
    call_command("seed_demo", "--scale", "0.01", stdout=open("/dev/null", "w"))
    before = Chart.objects.count()
    call_command("demo_load", "--rate", "6000", "--count", "5", "--seed", "3", stdout=open("/dev/null", "w"))
    assert Chart.objects.count() == before + 5
