"""/metrics (docs/metrics.md): the values against the database, who may scrape, the org
label's cap, the histograms recorded in other processes, promtool's check, the Grafana
dashboard's metric names."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import Count, Sum
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from charts import services
from charts import lifecycle
from charts.models import Chart, ChartState, FinishedCount
from common import metrics
from dashboard import selectors
from dashboard.simulate import publish_from_db
from control.models import SchedulerSettings
from orgs.models import WorkflowCost
from tests.factories import make_chart, make_org, make_workflow

ROOT = Path(__file__).resolve().parent.parent
NAMES = {  # the interface (issue 25): name -> type
    "fairsched_charts": "gauge", "fairsched_budget_units": "gauge", "fairsched_budget_in_use_units": "gauge",
    "fairsched_pool_capacity_units": "gauge", "fairsched_pool_in_use_units": "gauge",
    "fairsched_pool_blocked_heads": "gauge", "fairsched_org_pool_in_use_units": "gauge",
    "fairsched_org_clear_seconds": "gauge", "fairsched_chart_wait_seconds": "histogram",
    "fairsched_dispatch_delay_seconds": "histogram", "fairsched_charts_finished": "counter",
    "fairsched_eta_error_seconds": "histogram", "fairsched_eta_pass_seconds": "histogram",
    "fairsched_snapshot_age_seconds": "gauge", "fairsched_scheduler_up": "gauge",
    "fairsched_api_requests": "counter",
}


@pytest.fixture(autouse=True)
def _fresh_caches():
    selectors.clear_caches()
    yield
    selectors.clear_caches()


def scrape(client: Client | None = None, **extra) -> str:
    response = (client or Client()).get("/metrics", REMOTE_ADDR=extra.pop("REMOTE_ADDR", "127.0.0.1"), **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return response.content.decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value}."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def charts_of(got: dict, org: str) -> dict[str, float]:
    return {dict(labels)["state"]: v for (name, labels), v in got.items()
            if name == "fairsched_charts" and dict(labels)["org"] == org}


@pytest.fixture
def world(db):
    """Acme: 4 queued (1 paused), 1 running of cost 2; Beta held with 2 queued; Cedar: 1 queued
    costing more than the whole budget (blocked) and 1 that fits."""
    wf, big = make_workflow("code"), make_workflow("audit")
    acme, beta, cedar = make_org("Acme"), make_org("Beta", weight=0), make_org("Cedar")
    budget = SchedulerSettings.get().budget
    WorkflowCost.objects.create(org=cedar, workflow=big, cost=budget + 1)
    now = timezone.now()
    for i in range(4):
        make_chart(acme, wf, external_id=f"a-{i}", paused=(i == 3), created_at=now - timedelta(minutes=10 - i))
    make_chart(acme, wf, state=ChartState.RUNNING, dispatched_cost=2, started_at=now, dispatched_at=now)
    for i in range(2):
        make_chart(beta, wf, external_id=f"b-{i}")
    make_chart(cedar, big, external_id="c-big")
    make_chart(cedar, wf, external_id="c-0")
    return {"acme": acme, "beta": beta, "cedar": cedar, "wf": wf}


def _db_counts() -> dict[tuple[str, str], int]:
    return {(slug, state): n for slug, state, n in
            Chart.objects.values_list("org__slug", "state").annotate(n=Count("id")).order_by()}


def test_the_values_from_a_live_snapshot_agree_with_the_database(world, redis_url):
    publish_from_db()
    got = samples(scrape())
    db = _db_counts()
    assert charts_of(got, "acme") == {"queued": 3, "paused": 1, "held": 0, "blocked": 0, "running": 1}
    assert charts_of(got, "beta") == {"queued": 0, "paused": 0, "held": 2, "blocked": 0, "running": 0}
    assert charts_of(got, "cedar") == {"queued": 1, "paused": 0, "held": 0, "blocked": 1, "running": 0}
    for org in ("acme", "beta", "cedar"):
        c = charts_of(got, org)
        assert c["queued"] + c["paused"] + c["held"] + c["blocked"] == db.get((org, "queued"), 0)
        assert c["running"] == db.get((org, "running"), 0)
    assert got[("fairsched_budget_units", ())] == SchedulerSettings.get().budget
    assert got[("fairsched_budget_in_use_units", ())] == Chart.objects.filter(
        state="running").aggregate(s=Sum("dispatched_cost"))["s"] == 2
    assert got[("fairsched_scheduler_up", ())] == 1
    assert 0 <= got[("fairsched_snapshot_age_seconds", ())] < 5
    clear = {dict(labels)["org"]: v for (name, labels), v in got.items() if name == "fairsched_org_clear_seconds"}
    assert clear["acme"] > 0 and clear["cedar"] > 0
    assert "beta" not in clear  # held: nothing of it is planned, so it has no clear-time


def test_without_a_live_snapshot_the_counts_come_from_the_database(world, redis_url):
    got = samples(scrape())
    assert got[("fairsched_scheduler_up", ())] == 0
    assert ("fairsched_snapshot_age_seconds", ()) not in got
    assert charts_of(got, "acme") == {"queued": 3, "paused": 1, "held": 0, "blocked": 0, "running": 1}
    assert charts_of(got, "beta")["held"] == 2
    assert charts_of(got, "cedar")["queued"] == 2  # blocked needs the scheduler: counted as queued
    assert not [k for k in got if k[0] == "fairsched_org_clear_seconds"]
    assert got[("fairsched_budget_in_use_units", ())] == 2


def test_a_stale_snapshot_is_not_served_as_live(world, redis_url):
    publish_from_db(now=time.time() - 3600)
    got = samples(scrape())
    assert got[("fairsched_scheduler_up", ())] == 0
    assert got[("fairsched_snapshot_age_seconds", ())] > 3000
    assert charts_of(got, "cedar")["queued"] == 2  # the database's counts


def test_the_finished_counter_is_the_databases_count(world, redis_url):
    acme, cedar = world["acme"], world["cedar"]
    queued = list(Chart.objects.filter(org=acme, state="queued", paused=False).order_by("id"))
    services.chart_cancel(chart=queued[0])
    lifecycle.chart_fail_start(chart_id=queued[1].pk, error="refused")
    running = Chart.objects.get(org=acme, state="running")
    assert lifecycle.chart_record_outcome(chart_id=running.pk, state="succeeded")
    assert not lifecycle.chart_record_outcome(chart_id=running.pk, state="succeeded")  # idempotent: counted once
    services.chart_cancel(chart=Chart.objects.get(external_id="c-0"))
    got = samples(scrape())
    finished = {(dict(lb)["org"], dict(lb)["state"]): v for (name, lb), v in got.items()
                if name == "fairsched_charts_finished_total"}
    db = {k: n for k, n in _db_counts().items() if k[1] in ("succeeded", "failed", "cancelled")}
    assert {k: v for k, v in finished.items() if v} == db == {
        ("acme", "cancelled"): 1, ("acme", "failed"): 1, ("acme", "succeeded"): 1, ("cedar", "cancelled"): 1}
    assert cedar.pk in set(FinishedCount.objects.values_list("org_id", flat=True))


def test_every_org_s_finished_counter_starts_at_zero_for_each_final_state(world, redis_url, settings):
    """increase() needs a series' earlier sample: one born at its first finish lost that finish
    (issue 41, 4.12). Every org (and ``other``, when capped) has the three series from 0."""
    got = samples(scrape())
    finished = {(dict(lb)["org"], dict(lb)["state"]): v for (name, lb), v in got.items()
                if name == "fairsched_charts_finished_total"}
    orgs = {"acme", "beta", "cedar"}
    assert finished == {(org, state): 0 for org in orgs for state in ("succeeded", "failed", "cancelled")}
    settings.FAIRSCHED_METRICS_MAX_ORGS = 1
    got = samples(scrape())
    assert {(dict(lb)["org"], dict(lb)["state"]) for (name, lb) in got if name == "fairsched_charts_finished_total"
            } == {(org, state) for org in ("acme", "other") for state in ("succeeded", "failed", "cancelled")}


def test_invented_http_methods_add_no_series_to_the_api_counter(redis_url, db, settings):
    """The endpoint label names a known method or OTHER (issue 41, 4.1: 2,000 invented methods
    made 2,000 series for ever)."""
    from tests.api.conftest import producer
    from tests.factories import make_org

    settings.FAIRSCHED_API_RATE = 0.0
    acme = producer(make_org("Acme"))
    for i in range(50):
        assert acme.client.generic(f"X{i}Y", "/api/v1/charts").status_code == 405
    acme.client.generic("PATCH", "/api/v1/charts")
    counts = {dict(labels)["endpoint"] + " " + dict(labels)["code"]: v for (name, labels), v in samples(scrape()).items()
              if name == "fairsched_api_requests_total"}
    assert counts == {"OTHER /api/v1/charts 405": 50, "PATCH /api/v1/charts 405": 1}


def test_the_migration_counted_the_charts_finished_before_it(world, transactional_db):
    """0009 fills FinishedCount from the finished charts (a GROUP BY), as they were."""
    import importlib

    from django.apps import apps

    Chart.objects.filter(external_id__in=["a-0", "b-0"]).update(state="failed")
    Chart.objects.filter(external_id="c-0").update(state="succeeded")
    FinishedCount.objects.all().delete()
    importlib.import_module("charts.migrations.0010_finished_count").fill(apps, None)
    assert {(c.org.slug, c.state): c.count for c in FinishedCount.objects.select_related("org")} == {
        ("acme", "failed"): 1, ("beta", "failed"): 1, ("cedar", "succeeded"): 1}


def test_the_org_label_is_capped_and_the_rest_summed_as_other(world, redis_url, settings):
    settings.FAIRSCHED_METRICS_MAX_ORGS = 1
    publish_from_db()
    services.chart_cancel(chart=Chart.objects.get(external_id="b-0"))
    services.chart_cancel(chart=Chart.objects.get(external_id="c-0"))
    publish_from_db()
    got = samples(scrape())
    orgs = {dict(lb)["org"] for (name, lb) in got if name == "fairsched_charts"}
    assert orgs == {"acme", "other"}
    assert charts_of(got, "other") == {"queued": 0, "paused": 0, "held": 1, "blocked": 1, "running": 0}
    assert got[("fairsched_charts_finished_total", (("org", "other"), ("state", "cancelled")))] == 2


def test_the_histograms_recorded_by_another_process_are_served(world, redis_url):
    """The scheduler records in its own process (here a subprocess); every web process reads
    the same Redis hashes."""
    acme = world["acme"].pk
    code = ("import django; django.setup();"
            "from common import metrics;"
            "metrics.budget_freed(1000.0);"
            f"metrics.charts_started([({acme}, 950.0), ({acme}, 1100.0)], at=1200.0);"
            "metrics.eta_pass_done(0.3);"
            "metrics.api_request_done('charts.create', 201);"
            "assert metrics.flush()")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "REDIS_URL": redis_url}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = samples(scrape())
    wait = (("org", "acme"),)
    assert got[("fairsched_chart_wait_seconds_count", wait)] == 2
    assert got[("fairsched_chart_wait_seconds_sum", wait)] == 250 + 100
    assert got[("fairsched_chart_wait_seconds_bucket", (("le", "120.0"), ("org", "acme")))] == 1
    assert got[("fairsched_chart_wait_seconds_bucket", (("le", "300.0"), ("org", "acme")))] == 2
    # turns: 1000 (freed after the first one's creation), 1100 (its creation): delays 200 and 100
    assert got[("fairsched_dispatch_delay_seconds_sum", ())] == 300
    assert got[("fairsched_dispatch_delay_seconds_count", ())] == 2
    assert got[("fairsched_eta_pass_seconds_count", ())] == 1
    assert got[("fairsched_api_requests_total", (("code", "201"), ("endpoint", "charts.create")))] == 1
    again = samples(scrape())  # a second scrape (any web process) reads the same hashes
    assert {k: v for k, v in again.items() if "_seconds_" in k[0]} == {k: v for k, v in got.items() if "_seconds_" in k[0]}


def test_the_eta_error_is_recorded_with_the_outcome(world, redis_url, django_capture_on_commit_callbacks):
    running = Chart.objects.get(org=world["acme"], state="running")
    finish = timezone.now()
    Chart.objects.filter(pk=running.pk).update(eta_first_at=finish - timedelta(seconds=90))
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.chart_record_outcome(chart_id=running.pk, state="succeeded", finished_at=finish)
    got = samples(scrape())
    assert got[("fairsched_eta_error_seconds_count", ())] == 1
    assert got[("fairsched_eta_error_seconds_sum", ())] == pytest.approx(90)


def test_no_dispatch_delay_before_the_process_has_seen_budget_released(redis_url, monkeypatch):
    monkeypatch.setattr(metrics._Turns, "freed_at", None)
    metrics.charts_started([(1, 10.0)], at=70.0)
    assert metrics.flush()
    hist = metrics.read_histograms()
    assert hist["chart_wait_seconds"]["1"][1] == 60
    assert hist["dispatch_delay_seconds"] == {}


def test_a_scrape_without_redis_still_answers_from_the_database(world):
    got = samples(scrape())  # REDIS_URL points at a closed port in unit tests
    assert got[("fairsched_scheduler_up", ())] == 0
    assert charts_of(got, "acme")["running"] == 1


# ------------------------------------------------------------------ who may scrape
def test_without_a_token_only_loopback_clients_are_answered(db, settings):
    settings.FAIRSCHED_METRICS_TOKEN = ""
    settings.FAIRSCHED_BEHIND_PROXY = False
    c = Client()
    for addr in ("127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"):
        assert c.get("/metrics", REMOTE_ADDR=addr).status_code == 200, addr
    for addr in ("10.0.0.5", "192.168.1.2", "2001:db8::1", ""):
        assert c.get("/metrics", REMOTE_ADDR=addr).status_code == 403, addr
    # through a proxy on the same machine: the client is not loopback, whatever REMOTE_ADDR says
    assert c.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 403
    assert c.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_FORWARDED="for=203.0.113.9").status_code == 403
    assert c.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_REAL_IP="203.0.113.9").status_code == 403
    settings.FAIRSCHED_BEHIND_PROXY = True
    refused = c.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert refused.status_code == 403 and b"FAIRSCHED_METRICS_TOKEN" in refused.content
    assert c.post("/metrics", REMOTE_ADDR="127.0.0.1").status_code in (403, 405)


def test_with_a_token_it_is_needed_from_anywhere(db, settings):
    settings.FAIRSCHED_METRICS_TOKEN = "s3cret-token"
    c = Client()
    missing = c.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert missing.status_code == 401 and missing["WWW-Authenticate"].startswith("Bearer")
    assert c.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert c.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Basic s3cret-token").status_code == 401
    assert c.get("/metrics", REMOTE_ADDR="10.0.0.5", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200
    settings.FAIRSCHED_BEHIND_PROXY = True
    assert c.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9",
                 HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200


# ------------------------------------------------------------------ the format, the dashboard
def test_every_name_of_the_interface_is_served_with_its_type(world, redis_url):
    publish_from_db()
    metrics.api_request_done("charts.create", 201)
    types = {f.name: f.type for f in text_string_to_metric_families(scrape())}
    assert types == NAMES


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (Debian's prometheus package; .ci/run installs it)")
def test_promtool_accepts_the_output(world, redis_url, tmp_path):
    publish_from_db()
    metrics.api_request_done("charts.create", 201)
    metrics.charts_started([(world["acme"].pk, time.time() - 30)], at=time.time())
    assert metrics.flush()
    text = scrape()
    out = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    # promtool's lint only warns; none is expected
    assert out.stdout.strip() == "" and out.stderr.strip() == "", out.stdout + out.stderr


def test_the_grafana_dashboard_is_json_that_uses_only_these_metrics():
    board = json.loads((ROOT / "deploy" / "grafana" / "fairsched.json").read_text())
    exprs = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                exprs.append(node["expr"])
            if isinstance(node.get("query"), str) and "fairsched" in node["query"]:
                exprs.append(node["query"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(board)
    assert len(exprs) >= 4
    allowed = set()
    for name, kind in NAMES.items():
        allowed |= {f"{name}_total"} if kind == "counter" else (
            {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name})
    used = {m for e in exprs for m in re.findall(r"\bfairsched_[a-z_]+", e)}
    assert used <= allowed, used - allowed
    wanted = {"fairsched_charts", "fairsched_budget_in_use_units", "fairsched_chart_wait_seconds_bucket",
              "fairsched_eta_error_seconds_bucket"}  # queue depth, budget use, wait percentiles, ETA error
    assert wanted <= used


def test_an_api_request_counts_in_the_api_requests_counter(redis_url, db, settings):
    """The producer API's one hook (api.hooks, wired in ApiConfig.ready) reaches the counter:
    a real request through the middleware, its route as the endpoint, never its path."""
    from tests.api.conftest import producer
    from tests.factories import make_org, make_workflow

    settings.FAIRSCHED_API_RATE = 0.0
    acme = producer(make_org("Acme"))
    make_workflow("code")
    assert acme.client.get("/api/v1/status").status_code == 200
    assert acme.client.get("/api/v1/charts/999999").status_code == 404
    got = samples(scrape())
    counts = {dict(labels)["endpoint"] + " " + dict(labels)["code"]: v for (name, labels), v in got.items()
              if name == "fairsched_api_requests_total"}
    assert counts == {"GET /api/v1/status 200": 1, "GET /api/v1/charts/{chart_id} 404": 1}
