"""Small factories for tests: explicit arguments, sensible defaults."""
from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.utils import timezone

from charts.models import Chart
from orgs.models import Org, Workflow, WorkflowCost
from orgs.services import org_set_turnaround

_seq = itertools.count(1)


def make_org(name: str | None = None, *, weight: int = 1) -> Org:
    return Org.objects.create(name=name or f"Org {next(_seq)}", weight=weight)


def make_workflow(name: str = "code", *, temporal_type: str = "") -> Workflow:
    wf, _ = Workflow.objects.get_or_create(name=name, defaults={"temporal_type": temporal_type or "DemoChart"})
    return wf


def make_cost(org: Org, workflow: Workflow, cost: int) -> WorkflowCost:
    return WorkflowCost.objects.create(org=org, workflow=workflow, cost=cost)


def make_chart(org: Org, workflow: Workflow | None = None, *, created_at: datetime | None = None, **fields) -> Chart:
    """A chart row with any fields; its save notifies the scheduler on commit, as
    ``chart_submit`` does (``charts/signals.py``)."""
    return Chart.objects.create(
        org=org, workflow=workflow or make_workflow(), created_at=created_at or timezone.now(), **fields
    )


def make_backlog(spec: dict[Org, int], workflow: Workflow | None = None, *, start: datetime | None = None) -> list[Chart]:
    """Charts for several orgs, one minute apart, in the order of the spec."""
    start = start or timezone.now() - timedelta(hours=1)
    charts, minute = [], 0
    for org, n in spec.items():
        for _ in range(n):
            charts.append(make_chart(org, workflow, created_at=start + timedelta(minutes=minute)))
            minute += 1
    return charts


def make_user(username: str = "member", *, staff: bool = False, superuser: bool = False, perms: tuple[str, ...] = (),
              password: str = "pw-for-tests-1") -> "get_user_model()":
    User = get_user_model()
    if superuser:
        user = User.objects.create_superuser(username=username, password=password, email=f"{username}@example.com")
    else:
        user = User.objects.create_user(username=username, password=password, is_staff=staff)
    for perm in perms:
        app, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    return user


def make_flagged_backlog() -> tuple[Org, Org, Org]:
    """The Due list's backlog (orgs Acme, Beta, Cedar): Acme 110 charts late, Beta 6 late and
    younger (less late) than Acme's, Cedar held with 7 at risk (no ETA, due tomorrow explicitly):
    123 at risk or late, and the first 100 by slack are all Acme's."""
    wf = make_workflow("code")
    acme, beta, cedar = make_org("Acme"), make_org("Beta"), make_org("Cedar", weight=0)
    for org in (acme, beta):
        org_set_turnaround(org=org, turnaround=3600)
    now = timezone.now()
    Chart.objects.bulk_create(
        [Chart(org=acme, workflow=wf, external_id=f"a-{i}", created_at=now - timedelta(hours=5, minutes=i))
         for i in range(110)]
        + [Chart(org=beta, workflow=wf, external_id=f"b-{i}", created_at=now - timedelta(hours=2, minutes=i))
           for i in range(6)]
        + [Chart(org=cedar, workflow=wf, external_id=f"c-{i}", due_at=now + timedelta(days=1), due_explicit=True)
           for i in range(7)])
    return acme, beta, cedar


def make_pooled_world() -> dict:
    """Capacity pools set up through their services (docs/scheduling.md, "Pools"): ``llm`` of
    capacity 2 and ``gpu`` of 0; Acme's and Beta's summaries draw llm 1, Beta's renders gpu 1;
    Acme's ceiling in llm is 1. Acme and Beta each run a summary (llm 2 of 2 in use, Acme at its
    ceiling). Queued, oldest first: Acme's summary ``a-1`` (waits at its ceiling), Beta's summary
    ``b-1`` (the head of llm: waits for room) and Beta's render ``b-2`` (blocked: gpu is 0)."""
    from charts.models import ChartState
    from control.services import pool_set
    from orgs.services import org_pool_limit_set, workflow_cost_set

    summary, render = make_workflow("summary"), make_workflow("render")
    acme, beta = make_org("Acme"), make_org("Beta")
    pool_set(name="llm", capacity=2)
    pool_set(name="gpu", capacity=0)
    for org in (acme, beta):
        workflow_cost_set(org=org, workflow=summary, cost=1, pools={"llm": 1})
    workflow_cost_set(org=beta, workflow=render, cost=1, pools={"gpu": 1})
    org_pool_limit_set(org=acme, pool="llm", max=1)
    now = timezone.now()
    running = [make_chart(org, summary, external_id=f"{org.slug[0]}-0", state=ChartState.RUNNING,
                          created_at=now - timedelta(minutes=10), dispatched_at=now - timedelta(minutes=5),
                          started_at=now - timedelta(minutes=5), dispatched_cost=1) for org in (acme, beta)]
    a1 = make_chart(acme, summary, external_id="a-1", created_at=now - timedelta(minutes=3))
    b1 = make_chart(beta, summary, external_id="b-1", created_at=now - timedelta(minutes=2))
    b2 = make_chart(beta, render, external_id="b-2", created_at=now - timedelta(minutes=1))
    return {"acme": acme, "beta": beta, "summary": summary, "render": render, "running": running,
            "a1": a1, "b1": b1, "b2": b2}
