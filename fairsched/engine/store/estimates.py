"""The duration estimates the ETA pass uses, as the database holds them
(docs/scheduling.md, "The duration estimate"): :class:`~charts.models.DurationStat`'s
decaying means with the finished charts behind each, and each workflow's declared
``expected_duration_s``. Small tables, read whole: the scheduler reads them with the
other small tables (start-up and every resync), the web pages when they show an estimate."""
from __future__ import annotations

from charts.models import DurationStat
from fairsched.core import Durations
from orgs.models import Workflow


def read_durations() -> Durations:
    """The estimates: (org, workflow), (org, None) the org's, (None, workflow) the
    workflow's over all orgs, each the decaying mean of :class:`DurationStat` (``counts``:
    its all-time count); ``expected``: workflow name -> declared seconds."""
    averages: dict[tuple[str | None, str | None], float] = {}
    counts: dict[tuple[str | None, str | None], int] = {}
    for org, wf, count, mean in DurationStat.objects.values_list("org_id", "workflow__name", "count", "mean_s"):
        if count:
            key = (None if org is None else str(org), wf)
            averages[key], counts[key] = mean, count
    expected = {name: float(s) for name, s in
                Workflow.objects.filter(expected_duration_s__isnull=False).values_list("name", "expected_duration_s")}
    return Durations(averages, expected=expected, counts=counts)
