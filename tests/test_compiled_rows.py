"""The scheduler's reads whose SQL is built once per connection (``common.compiled.CompiledRows``,
``fairsched.engine.store.db._changed_sql``) give what the ORM's own querysets give, on SQLite and
PostgreSQL: the columns' conversions (a JSON column, a duration), a table changed between two
reads, and the resync's keyset chunks over charts that share an ``updated_at``."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from charts.models import Chart
from common.compiled import CompiledRows
from fairsched.engine.store import db
from orgs.models import Org, WorkflowCost
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db


def test_rows_are_the_querysets_with_each_columns_conversion_and_follow_the_table():
    acme = make_org("Acme")
    Org.objects.filter(pk=acme.pk).update(turnaround=timedelta(hours=2, seconds=3))
    code, review = make_workflow("code"), make_workflow("review")
    WorkflowCost.objects.create(org=acme, workflow=code, cost=2, pools={"llm": 1, "gpu": 2})
    orgs = CompiledRows(lambda: Org.objects.order_by("pk").values_list("pk", "name", "weight", "turnaround"))
    costs = CompiledRows(lambda: WorkflowCost.objects.order_by("pk").values_list("org_id", "workflow__name", "cost",
                                                                               "pools"))
    assert orgs.rows() == list(Org.objects.order_by("pk").values_list("pk", "name", "weight", "turnaround"))
    assert orgs.rows()[0][3] == timedelta(hours=2, seconds=3)
    assert costs.rows() == [(acme.pk, "code", 2, {"llm": 1, "gpu": 2})]
    # the statement is kept, not the rows: a change between two reads is read
    beacon = make_org("Beacon", weight=3)
    WorkflowCost.objects.create(org=beacon, workflow=review, cost=1, pools={})
    assert [r[1:3] for r in orgs.rows()] == [("Acme", 1), ("Beacon", 3)]
    assert costs.rows()[1] == (beacon.pk, "review", 1, {})


def test_the_resyncs_chunks_are_the_querysets_over_charts_sharing_a_time():
    org, code = make_org("Acme"), make_workflow("code")
    charts = [make_chart(org, code) for _ in range(12)]
    base = timezone.now().replace(microsecond=0)
    # four charts a time: keyset pagination must split a tie by id
    for i, chart in enumerate(charts):
        Chart.objects.filter(pk=chart.pk).update(updated_at=base + timedelta(seconds=i // 4))
    since = base + timedelta(seconds=1)

    def orm(after, limit):
        qs = Chart.objects.filter(updated_at__gte=since)
        if after is not None:
            qs = qs.filter(updated_at__gte=after[0]).exclude(updated_at=after[0], pk__lte=after[1])
        return [pk for pk in qs.order_by("updated_at", "pk").values_list("pk", flat=True)[:limit]]

    after, seen = None, []
    while True:
        got = db.read_changes(since, after, 3)
        ids = [r.id for r in got.charts]
        assert ids == orm(after, 3)
        seen += ids
        if got.more is None:
            break
        after = got.more
    assert seen == [c.pk for c in charts[4:]]
    # without a limit, and moved rows: the same reads
    Chart.objects.filter(pk=charts[0].pk).update(updated_at=F("updated_at") + timedelta(seconds=5))
    assert charts[0].pk in [r.id for r in db.read_changes(since, None, 50).charts]
    assert sorted(r.id for r in db.read_changes(since).charts) == sorted(orm(None, 50))
