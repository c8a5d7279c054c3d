"""``manage.py seed_demo``: the situation docs/scheduling.md motivates, ready to watch.

One large tenant with about a thousand charts waiting, several small ones, three
workflow types of different cost and duration (seconds to a few minutes, so the
demo moves), one org held, a few priority charts, and two capacity pools beside the
budget (docs/scheduling.md, "Pools"): ``llm`` (8 concurrent calls of a model) and ``gpu``
(4): coding draws on ``llm``, auditing on both, and the large tenant has a ceiling of 4 in
``llm``, so it can never hold the whole model. Everything goes through the
services (``org_create``, ``workflow_cost_set``, ``chart_submit_many``, ...), so
the scheduler hears about it like any other write.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from charts.models import Chart
from charts.services import chart_submit_many
from control.services import budget_set, pool_set
from orgs import services as org_services
from orgs.models import Org, Workflow


@dataclass(frozen=True)
class DemoWorkflow:
    name: str
    description: str
    seconds: tuple[float, float]  # DemoChart runs this long (payload["seconds"]), uniformly drawn
    cost: int  # per (org, workflow) pair; a few orgs pay more, see ORGS
    pools: tuple[tuple[str, int], ...] = ()  # what else it draws on beside the budget (DEMO_POOLS)

    @property
    def expected_s(self) -> int:
        """What it declares as its expected duration: the mean of what it runs."""
        return round(sum(self.seconds) / 2)


@dataclass(frozen=True)
class DemoOrg:
    name: str
    weight: int
    charts: int
    mix: tuple[float, float, float]  # share of review / code / audit
    held: bool = False
    priority: int = 0  # how many of its charts are in the priority tier
    cost_bump: int = 0  # added to every workflow's cost for this org (bigger models, say)


WORKFLOWS = (
    DemoWorkflow("review", "Quick second look at a coded chart (seconds).", (5.0, 20.0), 1),
    DemoWorkflow("code", "An agent codes a medical chart (under a minute).", (20.0, 60.0), 2, (("llm", 1),)),
    DemoWorkflow("audit", "Full audit trail with several tool calls (minutes).", (60.0, 180.0), 3,
                 (("llm", 2), ("gpu", 1))),
)
DEMO_POOLS = (("llm", 8), ("gpu", 4))  # one model's concurrent calls, a GPU fleet
DEMO_CEILINGS = (("Acme Health", "llm", 4),)  # the large tenant never holds more than half the model

ORGS = (
    DemoOrg("Acme Health", weight=2, charts=1000, mix=(0.5, 0.4, 0.1)),
    DemoOrg("Beacon Clinic", weight=1, charts=40, mix=(0.4, 0.4, 0.2), priority=2),
    DemoOrg("Cedar Labs", weight=1, charts=25, mix=(0.3, 0.5, 0.2), cost_bump=1),
    DemoOrg("Delta Care", weight=1, charts=15, mix=(0.6, 0.3, 0.1), priority=1),
    DemoOrg("Evergreen Medical", weight=1, charts=30, mix=(0.5, 0.3, 0.2), held=True),
    DemoOrg("Fjord Pediatrics", weight=1, charts=8, mix=(0.5, 0.5, 0.0), priority=1),
)

DEMO_BUDGET = 12
SHORT_SECONDS = (1.0, 5.0)  # --short: every chart runs this long
FAIL_RATE = 0.02  # a few charts fail (payload["fail"]), so failures show up too


def demo_chart(rng: random.Random, org: str, mix: tuple[float, float, float], external_id: str,
               *, priority: bool = False) -> dict:
    # Priority charts are quick reviews: they go first and finish soon, so the tier is seen at work.
    workflow = WORKFLOWS[0] if priority else rng.choices(WORKFLOWS, weights=mix)[0]
    low, high = workflow.seconds
    payload = {"seconds": round(rng.uniform(low, high), 1)}
    if rng.random() < FAIL_RATE:
        payload["fail"] = True
    return {"org": org, "workflow": workflow.name, "payload": payload, "external_id": external_id,
            "priority": priority}


class Command(BaseCommand):
    help = "Seed the demo: a large tenant, several small ones, three workflow types, one org held."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--if-empty", action="store_true",
                            help="do nothing if any org exists (what make run uses)")
        parser.add_argument("--scale", type=float, default=1.0,
                            help="multiply every org's chart count (e.g. 0.1 for a quick demo)")
        parser.add_argument("--seed", type=int, default=7, help="random seed (the demo is reproducible)")
        parser.add_argument("--short", action="store_true",
                            help="short charts only (1-5 s each): the whole backlog runs in minutes")

    def handle(self, *args, **opts) -> None:
        if Org.objects.exists():
            if opts["if_empty"]:
                self.stdout.write("Demo not seeded: the database already has orgs.")
                return
            if Org.objects.filter(name__in=[o.name for o in ORGS]).exists():
                raise CommandError("the demo orgs exist already (seed_demo runs once on a fresh database).")
        if opts["scale"] <= 0:
            raise CommandError("--scale must be above 0.")
        rng = random.Random(opts["seed"])
        with transaction.atomic():
            for name, capacity in DEMO_POOLS:
                pool_set(name=name, capacity=capacity)
            for wf in WORKFLOWS:  # each declares what it runs, so the first ETAs are right before any history
                expected = round(sum(SHORT_SECONDS) / 2) if opts["short"] else wf.expected_s
                org_services.workflow_create(name=wf.name, temporal_type="DemoChart", description=wf.description,
                                             expected_duration_s=expected)
            total = sum(self._seed_org(spec, rng, opts) for spec in ORGS)
            budget_set(budget=DEMO_BUDGET)
        self.stdout.write(self.style.SUCCESS(
            f"Demo seeded: {len(ORGS)} orgs ({sum(o.held for o in ORGS)} held), {len(WORKFLOWS)} workflows, "
            f"{total} charts ({Chart.objects.filter(priority=True).count()} priority), budget {DEMO_BUDGET}, "
            f"pools {', '.join(f'{p} {c}' for p, c in DEMO_POOLS)}."
        ))

    @staticmethod
    def _seed_org(spec: DemoOrg, rng: random.Random, opts: dict) -> int:
        """One demo org: its costs (and what its pairs draw on), its ceilings, its charts;
        held if the demo holds it. Returns how many charts it submitted."""
        org = org_services.org_create(name=spec.name, weight=spec.weight)
        for wf in WORKFLOWS:
            cost = wf.cost + spec.cost_bump
            if cost != 1 or wf.pools:  # the budget's units (default) and the pools' (llm, gpu)
                org_services.workflow_cost_set(org=org, workflow=Workflow.objects.get(name=wf.name),
                                               cost=cost, pools=dict(wf.pools, default=cost) if wf.pools else None)
        for org_name, pool, ceiling in DEMO_CEILINGS:
            if org_name == spec.name:
                org_services.org_pool_limit_set(org=org, pool=pool, max=ceiling)
        n = max(1, round(spec.charts * opts["scale"]))
        prefix = "".join(w[0] for w in spec.name.lower().split())
        items = [demo_chart(rng, org.slug, spec.mix, f"{prefix}-{i:05d}", priority=i < spec.priority)
                 for i in range(n)]
        if opts["short"]:
            for item in items:
                item["payload"] = {"seconds": round(rng.uniform(*SHORT_SECONDS), 1)}
        chart_submit_many(charts=items)
        if spec.held:
            org_services.org_hold(org=org)
        return n
