"""``fairsched.engine.reader.scenario_from_db`` gives charts that arrived after the scheduler's last
save of its round state the round the live queue would give them, counting dispatched
charts (the persisted ``used`` counts them)."""
from __future__ import annotations

import pytest

from charts.models import ChartState
from scheduling import QueuedChart
from scheduling.queue import FairQueue
from fairsched.engine.store import db
from fairsched.engine.reader import scenario_from_db
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def queued_chart(chart) -> QueuedChart:
    return QueuedChart(str(chart.pk), str(chart.org_id), chart.workflow.name, chart.created_at.timestamp(), chart.pk)


def test_arrival_after_the_save_counts_the_dispatched_charts():
    org = make_org("A", weight=2)
    wf = make_workflow("code")
    a1, a2 = make_chart(org, wf), make_chart(org, wf)
    queue = FairQueue(budget=4, weights={str(org.pk): 2}, track_rounds=True)
    for c in (a1, a2):
        queue.add(queued_chart(c))
    assert [c.id for c in queue.dispatch(1)] == [str(a1.pk)]  # a1 runs; round 0 holds a1 and a2
    a1.state = ChartState.RUNNING
    a1.save()
    db.save_rounds(queue.export_rounds(), queue.take_round_changes())

    a3 = make_chart(org, wf)  # arrives after the save
    queue.add(queued_chart(a3))
    assert queue.round_of(str(a3.pk)) == 1  # round 0 is full: a1 (dispatched) and a2

    rounds = {q["id"]: q.get("round") for q in scenario_from_db()["queued"]}
    assert rounds == {str(a2.pk): 0, str(a3.pk): 1}
