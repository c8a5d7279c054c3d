#!/usr/bin/env python
"""Figure: other orgs' start rate with poison charts at the head of the order, against the
same run without them.

Starts its own Redis and Temporal dev server, a fresh SQLite database, one
``runworker`` and one ``runscheduler`` (as ``bench/scheduler.py`` does). Budget 4;
org Beta's short charts (0.2 s) are started through the real stack twice:

1. baseline: nothing else queued;
2. poisoned: ``--poison`` charts of org Acme with a 5 MB payload (written through the
   ORM, around the services' size check) queued ahead of them, the chart Temporal
   refuses ("received message larger than max").

Beta's start rate is measured from Temporal's own start times, (n - 1) / (last start -
first start). The ratio poisoned / baseline is the figure (1.00: poison costs the others
nothing). Also printed: how the poison charts ended.

Usage: ``python bench/poison.py [--charts 120] [--poison 3]``
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._stack import live_stack  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charts", type=int, default=120, help="Beta's charts per phase")
    parser.add_argument("--poison", type=int, default=3, help="5 MB charts at the head in the second phase")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for a phase")
    args = parser.parse_args()

    with live_stack("fairsched-bench-poison-", spawn=("runworker", "runscheduler")) as stack:
        run(args, stack.temporal_url)

def run(args, temporal_url: str) -> None:
    from django.utils import timezone
    from temporalio.client import Client

    from charts.models import Chart, ChartState
    from control.services import scheduler_settings_set
    from orgs.models import Org, Workflow

    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(Client.connect(temporal_url))

    def start_times(ids: list[int]) -> list[float]:
        async def go():
            out = []
            for i in range(0, len(ids), 100):
                query = " OR ".join(f'WorkflowId = "chart-{c}"' for c in ids[i:i + 100])
                out += [wf.start_time.timestamp() async for wf in client.list_workflows(query)]
            return out
        for _ in range(100):  # visibility catches up within moments
            got = loop.run_until_complete(go())
            if len(got) == len(ids):
                return sorted(got)
            time.sleep(0.2)
        return sorted(got)

    def phase(beta: Org, acme: Org, wf: Workflow, poison: int) -> tuple[float, list[Chart]]:
        head = timezone.now() - timedelta(hours=1)
        bad = [Chart.objects.create(org=acme, workflow=wf, created_at=head + timedelta(seconds=i),
                                    payload={"seconds": 0.2, "notes": "x" * (5 * 1024 * 1024)})
               for i in range(poison)]
        ids = [c.pk for c in Chart.objects.bulk_create(
            [Chart(org=beta, workflow=wf, created_at=head + timedelta(minutes=1, seconds=i), payload={"seconds": 0.2})
             for i in range(args.charts)])]
        deadline = time.monotonic() + args.wait
        while Chart.objects.filter(pk__in=ids, state__in=[ChartState.QUEUED, ChartState.RUNNING]).exists():
            if time.monotonic() > deadline:
                done = Chart.objects.filter(pk__in=ids, state=ChartState.SUCCEEDED).count()
                print(f"  (phase cut at {args.wait:.0f} s: {done} of {len(ids)} of Beta's charts done)")
                break
            time.sleep(0.2)
        starts = start_times([c for c in ids if Chart.objects.get(pk=c).started_at is not None])
        rate = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 else 0.0
        return rate, [Chart.objects.get(pk=c.pk) for c in bad]

    acme = Org.objects.create(name="Acme", weight=1)
    beta = Org.objects.create(name="Beta", weight=1)
    wf = Workflow.objects.create(name="code", temporal_type="DemoChart")
    scheduler_settings_set(budget=4, eta_interval_s=3.0, reconcile_interval_s=5.0)
    base, _ = phase(beta, acme, wf, 0)
    print(f"Beta's start rate, {args.charts} charts of 0.2 s, budget 4, nothing ahead: {base:.1f} starts/s")
    poisoned, bad = phase(beta, acme, wf, args.poison)
    print(f"the same behind {args.poison} charts with a 5 MB payload: {poisoned:.1f} starts/s = "
          f"{poisoned / base if base else 0:.2f}x the baseline")
    for c in bad:
        print(f"  poison chart #{c.pk}: {c.state}; {c.error[:120]}")
    loop.close()


if __name__ == "__main__":
    main()
