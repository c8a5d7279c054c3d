"""``manage.py demo_load``: keep charts arriving so the demo stays alive.

Charts arrive as a Poisson process at ``--rate`` per minute, spread over the
orgs that are not held (the large tenant gets about half), through
``chart_submit`` like any producer. When the backlog is above ``--max-queued``
it waits, so a demo left running overnight does not grow without bound.
"""
from __future__ import annotations

import logging
import random
import signal
import time
import uuid

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections

from charts.models import Chart, ChartState
from charts.services import chart_submit
from scheduling.rules import HELD_WEIGHT
from fairsched.management.commands.seed_demo import ORGS, WORKFLOWS, demo_chart
from orgs.models import Org, Workflow

log = logging.getLogger("fairsched.demo_load")


class LoadGenerator:
    """One chart per :meth:`tick`; the command sleeps between ticks."""

    def __init__(self, *, rate_per_min: float, max_queued: int, rng: random.Random) -> None:
        self.rate_per_min = rate_per_min
        self.max_queued = max_queued
        self.rng = rng
        self.submitted = 0

    def next_delay(self) -> float:
        return self.rng.expovariate(self.rate_per_min / 60.0)

    def tick(self) -> Chart | None:
        """Submit one chart; None if the backlog is full or there is nowhere to submit."""
        if Chart.objects.filter(state=ChartState.QUEUED).count() >= self.max_queued:
            return None
        orgs = list(Org.objects.exclude(weight=HELD_WEIGHT).order_by("pk"))
        names = set(Workflow.objects.values_list("name", flat=True))
        if not orgs or not names:
            return None
        known = {o.name: o for o in ORGS}
        # The first (largest) org gets half the arrivals, so volume is skewed as in production.
        weights = [len(orgs) if i == 0 else 1 for i in range(len(orgs))]
        org = self.rng.choices(orgs, weights=weights)[0]
        mix = known[org.name].mix if org.name in known else (1 / 3, 1 / 3, 1 / 3)
        item = demo_chart(self.rng, org.slug, mix, f"load-{uuid.uuid4().hex[:12]}")
        if item["workflow"] not in names:  # not the demo's workflows: any workflow will do
            item["workflow"] = self.rng.choice(sorted(names))
        chart = chart_submit(**item)
        self.submitted += 1
        return chart


class Command(BaseCommand):
    help = "Keep demo charts arriving (Poisson, --rate per minute) through chart_submit."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rate", type=float, default=6.0, help="charts per minute (default 6)")
        parser.add_argument("--max-queued", type=int, default=3000,
                            help="pause while this many charts are queued (default 3000)")
        parser.add_argument("--count", type=int, default=None, help="stop after this many charts")
        parser.add_argument("--seed", type=int, default=None, help="random seed")

    def handle(self, *args, **opts) -> None:
        if opts["rate"] <= 0:
            raise CommandError("--rate must be above 0 charts per minute.")
        gen = LoadGenerator(rate_per_min=opts["rate"], max_queued=opts["max_queued"],
                            rng=random.Random(opts["seed"]))
        stopping = False

        def stop(signum, frame) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"demo_load: about {opts['rate']:g} chart(s) a minute "
                          f"(paused above {opts['max_queued']} queued)")
        failures = 0
        while not stopping and (opts["count"] is None or gen.submitted < opts["count"]):
            deadline = time.monotonic() + gen.next_delay()
            while not stopping and time.monotonic() < deadline:
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            if stopping:
                break
            try:
                chart = gen.tick()
                failures = 0
            except (DatabaseError, ValidationError) as exc:
                failures += 1
                log.warning("demo_load: submit failed (%s); retrying", exc)
                close_old_connections()
                time.sleep(min(30.0, 2.0 ** failures))
                continue
            if chart is not None:
                log.info("demo_load: %s for %s (%s)", chart, chart.org.name, chart.workflow.name)
        self.stdout.write(f"demo_load: stopped after {gen.submitted} chart(s)")
