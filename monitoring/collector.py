"""The metrics, rendered by prometheus-client from one :func:`monitoring.sources.read` per scrape.

A custom collector on a registry of its own: nothing is kept in the web process (no
per-process counters, no process or GC metrics, which would differ between the web
processes a load balancer spreads scrapes over), so every web process serves the same
numbers. The ``org`` label is the org's slug for the first ``FAIRSCHED_METRICS_MAX_ORGS``
orgs by id (oldest first: a series never moves between its org and ``other`` while orgs
are only added); every other org is summed into ``org="other"``.
"""
from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings
from prometheus_client.core import (CollectorRegistry, CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, Metric)
from prometheus_client.registry import Collector

from common import metrics
from monitoring import sources

OTHER = "other"
FINAL = ("succeeded", "failed", "cancelled")


class Labels:
    """Org id -> its ``org`` label, the cardinality capped."""

    def __init__(self, orgs: list[tuple[int, str]], cap: int) -> None:
        self.kept = dict(orgs[:max(0, cap)])
        self.capped = len(orgs) > len(self.kept)

    def __call__(self, org_id: int | str) -> str:
        try:
            return self.kept.get(int(org_id), OTHER)
        except (TypeError, ValueError):
            return OTHER

    def all(self) -> list[str]:
        """Every label an org-labelled gauge has a series for."""
        return list(self.kept.values()) + ([OTHER] if self.capped else [])


def _fmt(bound: float) -> str:
    return str(float(bound))


def _histogram(h: metrics.Histogram, per: dict[str, tuple[list[int], float]], label) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(f"fairsched_{h.name}", h.help, labels=["org"] if h.per_org else None)
    merged: dict[str, tuple[list[int], float]] = {}
    for raw, (counts, total) in per.items():
        key = label(raw) if h.per_org else ""
        got = merged.get(key)
        merged[key] = (counts, total) if got is None else ([a + b for a, b in zip(got[0], counts)], got[1] + total)
    if not h.per_org and "" not in merged:
        merged[""] = ([0] * (len(h.bounds) + 1), 0.0)  # the series exists from the start
    for key in sorted(merged):
        counts, total = merged[key]
        buckets, running = [], 0
        for bound, n in zip([*map(_fmt, h.bounds), "+Inf"], counts):
            running += n
            buckets.append((bound, running))
        fam.add_metric([key] if h.per_org else [], buckets, sum_value=total)
    return fam


def _pools(r: sources.Reading, label: Labels) -> Iterator[Metric]:
    """The capacity pools (docs/scheduling.md, "Pools"), from the live snapshot: each pool's
    capacity, units in use and blocked head, each org's units in use per pool. Without pools
    the budget is the one pool, ``default``."""
    pools = r.pools or ([{"name": "default", "capacity": r.budget, "in_use": r.in_use or 0, "blocked_by": None}]
                        if r.budget is not None else [])
    if not pools:
        return
    cap = GaugeMetricFamily("fairsched_pool_capacity_units", "A pool's capacity in units (default: the budget).",
                            labels=["pool"])
    used = GaugeMetricFamily("fairsched_pool_in_use_units", "The units of a pool the running charts hold.",
                             labels=["pool"])
    heads = GaugeMetricFamily("fairsched_pool_blocked_heads", "1 while a chart at the head of the order waits for "
                              "room in this pool (it holds back the charts behind it that draw on it), else 0.",
                              labels=["pool"])
    for p in pools:
        cap.add_metric([p["name"]], p["capacity"])
        used.add_metric([p["name"]], p["in_use"])
        heads.add_metric([p["name"]], 0 if p.get("blocked_by") is None else 1)
    yield from (cap, used, heads)
    per_org = GaugeMetricFamily("fairsched_org_pool_in_use_units", "The units of a pool an org's running charts "
                                "hold.", labels=["org", "pool"])
    grouped: dict[tuple[str, str], int] = {}
    for org_id, per in r.org_pools.items():
        for pool, row in per.items():
            key = (label(org_id), pool)
            grouped[key] = grouped.get(key, 0) + int(row.get("in_use", 0))
    for (org, pool) in sorted(grouped):
        per_org.add_metric([org, pool], grouped[(org, pool)])
    yield per_org


class FairschedCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        r = sources.read()
        label = Labels(r.orgs, settings.FAIRSCHED_METRICS_MAX_ORGS)

        charts = GaugeMetricFamily(
            "fairsched_charts", "Charts not finished, by org and state (queued: in the fair order, waiting "
            "their turn; paused, held, blocked: set aside; running). The states do not overlap.",
            labels=["org", "state"])
        per: dict[str, dict[str, int]] = {org: dict.fromkeys(sources.STATES, 0) for org in label.all()}
        for org_id, counts in r.charts.items():
            row = per.setdefault(label(org_id), dict.fromkeys(sources.STATES, 0))
            for state, n in counts.items():
                row[state] += n
        for org in sorted(per):
            for state in sources.STATES:
                charts.add_metric([org, state], per[org][state])
        yield charts

        if r.budget is not None:
            yield GaugeMetricFamily("fairsched_budget_units", "The budget: the cost the running charts may hold.",
                                    value=r.budget)
        if r.in_use is not None:
            yield GaugeMetricFamily("fairsched_budget_in_use_units", "The cost the running charts hold.",
                                    value=r.in_use)

        yield from _pools(r, label)

        clear = GaugeMetricFamily(
            "fairsched_org_clear_seconds", "Seconds until the org's planned work is done (its clear-time); "
            "absent for an org with no clear-time (nothing of it planned, or no live snapshot).", labels=["org"])
        grouped: dict[str, float] = {}
        for org_id, seconds in r.clear_s.items():
            key = label(org_id)
            grouped[key] = max(grouped.get(key, 0.0), seconds)  # a group clears when its last org does
        for org in sorted(grouped):
            clear.add_metric([org], grouped[org])
        yield clear

        for h in metrics.HISTOGRAMS:
            yield _histogram(h, r.histograms.get(h.name, {}), label)

        finished = CounterMetricFamily("fairsched_charts_finished", "Charts that reached a final state, by org "
                                       "and state (the database's counter).", labels=["org", "state"])
        # Every org and final state from 0: a series born at its first finish would lose that
        # finish to increase() and rate() (they need two samples), and the panels with it.
        totals: dict[tuple[str, str], int] = {(org, state): 0 for org in label.all() for state in FINAL}
        for (org_id, state), n in r.finished.items():
            key = (label(org_id), state)
            totals[key] = totals.get(key, 0) + n
        for (org, state) in sorted(totals):
            finished.add_metric([org, state], totals[(org, state)])
        yield finished

        if r.snapshot_age_s is not None:
            yield GaugeMetricFamily("fairsched_snapshot_age_seconds", "Seconds since the scheduler published or "
                                    "last confirmed its snapshot; absent when none is stored.",
                                    value=r.snapshot_age_s)
        yield GaugeMetricFamily("fairsched_scheduler_up", "1 while the scheduler's snapshot is live (not stale: "
                                "the pages' rule), else 0.", value=1 if r.scheduler_up else 0)

        api = CounterMetricFamily("fairsched_api_requests", "Requests to the producer API, by endpoint and "
                                  "status code.", labels=["endpoint", "code"])
        for (endpoint, code) in sorted(r.api):
            api.add_metric([endpoint, code], r.api[(endpoint, code)])
        yield api


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(FairschedCollector())
