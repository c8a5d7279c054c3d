"""``fairsched.live.scenario_from_db`` gives charts that arrived after the scheduler's last
publication the round the live queue would give them, counting dispatched charts."""
from __future__ import annotations

import pytest

from charts.models import ChartState
from fairsched import snapshot
from fairsched.core import FairQueue, QueuedChart
from fairsched.live import scenario_from_db
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def queued_chart(chart) -> QueuedChart:
    return QueuedChart(str(chart.pk), str(chart.org_id), chart.workflow.name, chart.created_at.timestamp(), chart.pk)


def publish(queue: FairQueue, *, with_rounds: bool) -> None:
    """What the scheduler stores, reduced to the fields live.py reads."""
    rows = [{"id": int(c.id), "pos": i, "org": int(c.org), "round": queue.round_of(c.id), "state": "ordered"}
            for i, c in enumerate(queue.iter_charts())]
    snap = {"version": 1, "head": queue.head}
    if with_rounds:
        snap["rounds"] = {org: list(lu) for org, lu in queue.round_state().items()}
    snapshot.store(snap, rows, {})


@pytest.mark.parametrize("with_rounds", [True, False], ids=["published-rounds", "older-snapshot"])
def test_arrival_after_publication_counts_the_dispatched_charts(redis_url, with_rounds):
    org = make_org("A", weight=2)
    wf = make_workflow("code")
    a1, a2 = make_chart(org, wf), make_chart(org, wf)
    queue = FairQueue(budget=5, weights={str(org.pk): 2})
    for c in (a1, a2):
        queue.add(queued_chart(c))
    assert [c.id for c in queue.dispatch(1)] == [str(a1.pk)]  # a1 runs; round 0 holds a1 and a2
    a1.state = ChartState.RUNNING
    a1.save()
    publish(queue, with_rounds=with_rounds)

    a3 = make_chart(org, wf)  # arrives after the publication
    queue.add(queued_chart(a3))
    assert queue.round_of(str(a3.pk)) == 1  # round 0 is full: a1 (dispatched) and a2

    rounds = {q["id"]: q.get("round") for q in scenario_from_db()["queued"]}
    assert rounds[str(a2.pk)] == 0
    if with_rounds:
        assert rounds[str(a3.pk)] == 1
    else:  # what the published order alone shows: the dispatched a1 is invisible
        assert rounds[str(a3.pk)] == 0
