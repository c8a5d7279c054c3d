"""A real Prometheus (Debian's ``prometheus`` package) scrapes a running stack: the scheduler
and worker run charts on Temporal, daphne serves ``/metrics`` behind a bearer token, and the
values are queried back through Prometheus's HTTP API and compared with the database."""
from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from django.db.models import Count

from charts.models import Chart
from control.models import SchedulerSettings
from fairsched.runtime import embedded
from tests.browser.conftest import Daphne
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import database_url, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
TOKEN = "scrape-token-for-tests"


@pytest.fixture
def prometheus_bin() -> str:
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (Debian's prometheus package: apt-get install prometheus; "
                    ".ci/run installs it where it runs as root)")
    return PROMETHEUS


class Prometheus:
    def __init__(self, binary: str, target: str, workdir: Path) -> None:
        self.port = embedded.free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "token").write_text(TOKEN)
        (workdir / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: fairsched\n    metrics_path: /metrics\n"
            f"    authorization:\n      type: Bearer\n      credentials_file: {workdir / 'token'}\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        self.log = open(workdir / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        embedded.wait_for_port(self.port, timeout=60, proc=self.proc)

    def query(self, expr: str) -> dict[tuple, float]:
        """{labels (sorted items, without __name__): value} of an instant query."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return {tuple(sorted((k, v) for k, v in r["metric"].items() if k not in ("__name__", "job", "instance"))):
                float(r["value"][1]) for r in body["data"]["result"]}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def test_a_real_prometheus_scrapes_the_stack_and_reads_back_the_databases_values(live, prometheus_bin, tmp_path,
                                                                                  monkeypatch):
    s = SchedulerSettings.get()
    s.budget, s.eta_interval_s, s.reconcile_interval_s = 2, 0.5, 1.0
    s.save()
    acme, beta = make_org("Acme"), make_org("Beta", weight=0)  # Beta is held: its charts never start
    wf = make_workflow("code", temporal_type="DemoChart")
    charts = [make_chart(acme, wf, payload={"seconds": 0.2}) for _ in range(4)]
    charts.append(make_chart(acme, wf, payload={"seconds": 0.2, "fail": True}))
    for _ in range(3):
        make_chart(beta, wf, payload={"seconds": 0.2})
    ids = [c.pk for c in charts]

    web = Daphne(database_url(), live.env["REDIS_URL"], log_name="daphne-prometheus.log")
    monkeypatch.setenv("FAIRSCHED_METRICS_TOKEN", TOKEN)  # daphne's environment is this one's
    web.start()
    prom = None
    try:
        live.shared_worker()
        live.scheduler()
        wait_until(lambda: Chart.objects.filter(pk__in=ids, state__in=["queued", "running"]).count() == 0,
                   timeout=90, what="Acme's charts final")
        # the web refuses a scrape without the token
        try:
            urllib.request.urlopen(f"{web.url}/metrics", timeout=5)
            raise AssertionError("/metrics answered without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401

        prom = Prometheus(prometheus_bin, f"127.0.0.1:{web.port}", tmp_path / "prometheus")
        finished = {(("org", slug), ("state", state)): float(n) for slug, state, n in
                    Chart.objects.filter(state__in=["succeeded", "failed", "cancelled"])
                    .values_list("org__slug", "state").annotate(n=Count("id")).order_by()}
        assert finished == {(("org", "acme"), ("state", "succeeded")): 4.0,
                            (("org", "acme"), ("state", "failed")): 1.0}
        # every org's three final states are exported from 0, so increase() counts each first finish
        finished = {(("org", slug), ("state", state)): finished.get((("org", slug), ("state", state)), 0.0)
                    for slug in ("acme", "beta") for state in ("succeeded", "failed", "cancelled")}

        want = {'up{job="fairsched"}': {(): 1.0}, "fairsched_scheduler_up": {(): 1.0},
                "fairsched_charts_finished_total": finished,
                'fairsched_charts{org="beta",state="held"}': {(("org", "beta"), ("state", "held")): 3.0},
                'fairsched_chart_wait_seconds_count{org="acme"}': {(("org", "acme"),): 5.0},
                "fairsched_budget_units": {(): 2.0}, "fairsched_budget_in_use_units": {(): 0.0}}
        last: dict = {}

        def agrees() -> bool:
            try:
                got = {q: prom.query(q) for q in want}
                got["fairsched_eta_pass_seconds_count"] = prom.query("fairsched_eta_pass_seconds_count")
            except OSError as exc:
                last["error"] = repr(exc)
                return False
            last.clear()
            last.update({q: v for q, v in got.items() if q in want and v != want[q]})
            if got["fairsched_eta_pass_seconds_count"].get((), 0) <= 0:
                last["fairsched_eta_pass_seconds_count"] = got["fairsched_eta_pass_seconds_count"]
            return not last

        try:
            # a loaded machine (the whole suite on 2 cores) took over a minute once
            wait_until(agrees, timeout=120, interval=0.5, what="Prometheus to read the database's values back")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; still different: {last}") from None
        # a histogram quantile works over the scraped buckets
        wait = prom.query('histogram_quantile(0.5, sum by (le) (fairsched_chart_wait_seconds_bucket{org="acme"}))')
        assert wait and 0 < wait[()] < 300
        assert prom.query('fairsched_charts{org="acme",state="queued"}') == {(("org", "acme"), ("state", "queued")): 0.0}
    finally:
        if prom is not None:
            prom.stop()
        web.stop()
