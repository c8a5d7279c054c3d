"""The live scheduler keeps dispatching while an ETA pass runs (real Temporal, Redis, DB).

The pass is held open by a test gate (``faulty_scheduler.py --eta-gate``: the pass's thread
waits while the file exists), standing for a pass that takes long on a large backlog.
"""
from __future__ import annotations

import pytest

from charts.models import Chart, ChartState
from common import snapshot
from control.models import SchedulerSettings
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_chart_whose_turn_has_come_is_dispatched_while_an_eta_pass_runs(live, tmp_path):
    s = SchedulerSettings.get()
    s.budget, s.eta_interval_s, s.reconcile_interval_s = 1, 0.5, 1.0
    s.save()
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    first = make_chart(org, wf, payload={"seconds": 0.3})
    gate = tmp_path / "eta-gate"
    gate.touch()
    live.shared_worker()
    sched = live.faulty_scheduler("--eta-gate", str(gate))
    wait_until(lambda: Chart.objects.get(pk=first.pk).state == ChartState.SUCCEEDED, timeout=60,
               what="the first chart to run while the first ETA pass waits at the gate")
    # Still no snapshot: the first pass has not finished. A chart that arrives now is
    # dispatched all the same (its turn has come: the budget is free).
    assert snapshot.read_snapshot() is None, sched.log()[-2000:]
    second = make_chart(org, wf, payload={"seconds": 0.3})
    wait_until(lambda: Chart.objects.get(pk=second.pk).state == ChartState.SUCCEEDED, timeout=60,
               what="the second chart to run while the ETA pass still waits")
    assert snapshot.read_snapshot() is None, sched.log()[-2000:]
    gate.unlink()
    wait_until(lambda: snapshot.read_snapshot() is not None, timeout=30, what="the pass to publish once let go")
