"""Two deployments on one Temporal namespace, end to end: the real scheduler and worker
against the real dev server, next to workflows of another deployment whose ids are what
this deployment's ids were before they named it (``chart-<pk>``)."""
from __future__ import annotations

import uuid

import pytest
from temporalio.common import WorkflowIDConflictPolicy

from charts.models import Chart, ChartState
from control.models import Deployment
from fairsched.temporal.shared import workflow_id
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until
from tests.integration.test_scheduler_live import all_final, configure

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_foreign_workflow_with_a_charts_old_id_is_neither_its_outcome_nor_adopted(live, temporal):
    configure(budget=2)
    Deployment.objects.create(pk=1, name="alpha", legacy_below=1)  # this deployment: every chart is chart-alpha-<pk>
    org, wf = make_org("Acme"), make_workflow("code", temporal_type="DemoChart")
    done, busy = (make_chart(org, wf, payload={"seconds": 0.2}) for _ in range(2))
    # The other deployment's chart-<pk> workflows (no worker of ours serves them): one closed, one running.
    nobody = f"nobody-{uuid.uuid4().hex[:8]}"
    for chart in (done, busy):
        temporal.run(temporal.client.start_workflow(
            "ForeignChart", {"chart_id": chart.pk}, id=f"chart-{chart.pk}", task_queue=nobody,
            id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING))
    temporal.run(temporal.client.get_workflow_handle(f"chart-{done.pk}").terminate(reason="beta's own end"))

    live.shared_worker()
    sched = live.scheduler()
    wait_until(lambda: all_final([done.pk, busy.pk]), timeout=60, what="both charts final")
    for chart in (done, busy):
        chart.refresh_from_db()
        assert (chart.state, chart.error) == (ChartState.SUCCEEDED, ""), chart.error  # ran, on its own workflow
        assert workflow_id(chart.pk) == f"chart-alpha-{chart.pk}"
        assert temporal.describe(workflow_id(chart.pk)).run_id == chart.temporal_run_id
    assert temporal.describe(f"chart-{busy.pk}").status.name == "RUNNING"  # the other deployment's, untouched
    assert "adopted" not in sched.log()
    temporal.run(temporal.client.get_workflow_handle(f"chart-{busy.pk}").terminate(reason="test over"))
    assert Chart.objects.filter(state=ChartState.SUCCEEDED).count() == 2
