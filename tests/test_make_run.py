"""``make run``: the whole system from one command, on free ports, in a temporary data
directory; and the supervisor underneath it."""
from __future__ import annotations

import asyncio
import http.cookiejar
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from io import StringIO
from pathlib import Path

import psutil
import pytest
from django.core.management import get_commands

from fairsched.runtime.embedded import free_port
from fairsched.runtime.supervisor import ProcessSpec, Supervisor, SupervisorError

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


# --- the supervisor, with tiny stand-in processes ----------------------------------------


def _script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [PY, str(path)]


def _run_until(sup: Supervisor, cond, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        assert not sup.fatal, sup.fatal
        sup.tick()
        time.sleep(0.05)


LISTENER = """
    import socket, sys, time
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
    print("listening", flush=True)
    while True:
        time.sleep(0.1)
"""


def test_a_process_starts_once_the_port_it_needs_answers_and_is_restarted_when_it_exits(tmp_path):
    port = free_port()
    out = StringIO()
    sup = Supervisor(out=out)
    sup.BACKOFF_S = (0.2,)
    marker = tmp_path / "starts"
    sup.add(ProcessSpec("app", _script(tmp_path, "app", f"""
        with open({str(marker)!r}, "a") as f: f.write("x")
        print("app started", flush=True)
    """), needs=(port,)))
    sup.tick()
    time.sleep(0.3)
    sup.tick()
    assert not marker.exists()  # waits for the port
    service = sup.add(ProcessSpec("svc", _script(tmp_path, "svc", LISTENER) + [str(port)], listens=port,
                                  essential=True, service=True))
    try:
        _run_until(sup, lambda: marker.exists() and len(marker.read_text()) >= 3)
        assert service.ready
        text = out.getvalue()
        assert "svc is ready on port" in text and "app exited with status 0" in text and "restarting in" in text
    finally:
        sup.shutdown()
    assert service.popen.poll() is not None


def test_a_service_killed_by_hand_is_started_again(tmp_path):
    port = free_port()
    out = StringIO()
    sup = Supervisor(out=out)
    sup.BACKOFF_S = (0.2,)
    svc = sup.add(ProcessSpec("svc", _script(tmp_path, "svc", LISTENER) + [str(port)], listens=port,
                              essential=True, service=True))
    try:
        _run_until(sup, lambda: svc.ready)
        first = svc.popen.pid
        os.kill(first, signal.SIGKILL)
        _run_until(sup, lambda: svc.popen.pid != first and svc.ready)
        assert "svc exited with status -9" in out.getvalue() and svc.restarts == 1
    finally:
        sup.shutdown()


def test_an_essential_service_that_cannot_start_stops_everything_with_its_last_words(tmp_path):
    sup = Supervisor(out=StringIO())
    sup.add(ProcessSpec("redis", _script(tmp_path, "bad", """
        import sys
        print("FATAL: cannot open var/redis/dump.rdb: permission denied", flush=True)
        sys.exit(3)
    """), listens=free_port(), essential=True, service=True))
    with pytest.raises(SupervisorError) as exc:
        sup.wait_ready("redis", 10)
    assert "redis could not start" in str(exc.value)
    assert "exited with status 3" in str(exc.value)
    assert "permission denied" in str(exc.value)
    sup.shutdown()


def test_shutdown_stops_apps_before_services_and_kills_escaped_descendants(tmp_path):
    """An app that ignores SIGTERM is killed; a grandchild in its own session (as rq's
    work horse is) does not survive; the service stops last."""
    port = free_port()
    order = tmp_path / "order"
    sup = Supervisor(out=StringIO())
    sup.add(ProcessSpec("svc", _script(tmp_path, "svc", f"""
        import signal, socket, sys, time
        def bye(*a):
            open({str(order)!r}, "a").write("svc\\n"); sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", {port})); s.listen()
        while True: time.sleep(0.1)
    """), listens=port, essential=True, service=True))
    sup.add(ProcessSpec("stubborn", _script(tmp_path, "stubborn", f"""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, lambda *a: open({str(order)!r}, "a").write("stubborn\\n"))
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        while True: time.sleep(0.1)
    """), stop_timeout_s=1.0))
    try:
        _run_until(sup, lambda: sup.ready("svc") and sup.get("stubborn").popen is not None)
        time.sleep(0.5)
        sup._scan_descendants()
        escaped = list(sup.get("stubborn").descendants.values())
        assert len(escaped) == 1 and os.getsid(escaped[0].pid) != os.getsid(sup.get("stubborn").popen.pid)
    finally:
        sup.shutdown()
    assert order.read_text().splitlines()[-1] == "svc"  # the service stopped after the app
    assert "stubborn" in order.read_text()
    gone, alive = psutil.wait_procs(escaped, timeout=5)
    assert alive == []


def test_shutdown_waits_out_a_warm_stop_within_its_bound_and_kills_only_past_it(tmp_path):
    """The order for every app: SIGTERM, (a second SIGTERM halfway,) SIGKILL only after its
    stop_timeout_s. A warm stop that takes a while within its bound ends on its own (status 0);
    one that never ends is killed; shutdown returns either way."""
    sup = Supervisor(out=StringIO())
    sup.add(ProcessSpec("slow", _script(tmp_path, "slow", """
        import signal, sys, time
        def bye(*a):
            time.sleep(1.5); sys.exit(0)  # a warm stop: release a lease, log, exit
        signal.signal(signal.SIGTERM, bye)
        while True: time.sleep(0.1)
    """), stop_timeout_s=6.0))
    sup.add(ProcessSpec("stubborn", _script(tmp_path, "stubborn", """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True: time.sleep(0.1)
    """), stop_timeout_s=1.0))
    try:
        _run_until(sup, lambda: all(p.popen is not None for p in sup.procs))
        time.sleep(0.5)  # both have installed their handlers
    finally:
        sup.shutdown()
    assert sup.get("slow").popen.returncode == 0
    assert sup.get("stubborn").popen.returncode == -signal.SIGKILL
    assert "stubborn did not stop within 1 s: SIGKILL" in sup.out.getvalue()


# --- runall's refusals (fast: nothing is started) ----------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"REDIS_URL", "TEMPORAL_ADDRESS", "TEMPORAL_UI_URL", "DATABASE_URL", "PORT",
                        "FAIRSCHED_VAR_DIR", "FAIRSCHED_CHANNEL_LAYER", "DJANGO_SETTINGS_MODULE"}}
    env.update(DATABASE_URL="", PYTHONUNBUFFERED="1", **extra)
    return env


def test_runall_refuses_a_taken_port_clearly(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([PY, "manage.py", "runall"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                                env=_env(PORT=str(port), FAIRSCHED_VAR_DIR=str(tmp_path / "var")))
    assert result.returncode == 1
    assert f"port {port} (PORT) is taken" in result.stdout and f"PORT={port + 1} make run" in result.stdout


def test_runall_refuses_a_second_run_on_the_same_data(tmp_path):
    import fcntl

    run = tmp_path / "var" / "run"
    run.mkdir(parents=True)
    with open(run / "runall.lock", "w") as lock:
        lock.write("4242")
        lock.flush()
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run([PY, "manage.py", "runall"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                                env=_env(PORT=str(free_port()), FAIRSCHED_VAR_DIR=str(tmp_path / "var")))
    assert result.returncode != 0
    assert "Fairsched is already running from" in result.stderr and "pid 4242" in result.stderr


# --- make run, for real --------------------------------------------------------------------


class System:
    """``make run`` in a process group of its own, its output in a file."""

    def __init__(self, tmp_path: Path, var: Path | None = None, **env: str) -> None:
        self.var = var or tmp_path / "var"
        self.port = free_port()
        self.temporal_port = free_port()
        self.log = tmp_path / f"make-run-{len(list(tmp_path.glob('make-run-*')))}.log"
        self.env = _env(PORT=str(self.port), FAIRSCHED_VAR_DIR=str(self.var),
                        FAIRSCHED_REDIS_PORT=str(free_port()), FAIRSCHED_TEMPORAL_PORT=str(self.temporal_port),
                        FAIRSCHED_TEMPORAL_UI_PORT=str(free_port()), **env)
        self.seen: dict[int, psutil.Process] = {}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["make", "--no-print-directory", "run"], cwd=ROOT, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def watch(self) -> None:
        """Remember every descendant ever seen (they must all be gone after the stop)."""
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def wait_for(self, cond, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while True:
            self.watch()
            value = cond()
            if value:
                return value
            if self.proc.poll() is not None:
                pytest.fail(f"make run exited ({self.proc.returncode}) while waiting for {what}:\n{self.output()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} not within {timeout:.0f} s:\n{self.output()[-4000:]}")
            time.sleep(0.5)

    def get(self, path: str, opener=None) -> tuple[int, str]:
        try:
            with (opener or urllib.request.build_opener()).open(self.url(path), timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""
        except OSError:
            return 0, ""

    def db(self, sql: str):
        with sqlite3.connect(f"file:{self.var / 'fairsched.sqlite3'}?mode=ro", uri=True, timeout=10) as conn:
            return conn.execute(sql).fetchall()

    def stop(self) -> list[psutil.Process]:
        """SIGTERM to make (as a service manager would); returns what is still alive after it exits."""
        self.watch()
        ours = self.our_processes()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            pytest.fail(f"make run did not stop within 90 s after SIGTERM:\n{self.output()[-3000:]}")
        candidates = list({p.pid: p for p in [*self.seen.values(), *ours]}.values())
        _, alive = psutil.wait_procs(candidates, timeout=3)
        return alive + [p for p in self.our_processes() if p.pid not in {a.pid for a in alive}]

    def our_processes(self) -> list[psutil.Process]:
        """Every process whose environment points at this run's data directory."""
        found = []
        for p in psutil.process_iter():
            try:
                if p.pid != os.getpid() and p.environ().get("FAIRSCHED_VAR_DIR") == str(self.var):
                    found.append(p)
            except psutil.Error:
                continue
        return found

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        for p in [*self.seen.values(), *self.our_processes()]:
            try:
                p.kill()
            except psutil.Error:
                pass


def _login(system: System) -> urllib.request.OpenerDirector:
    user, password = (system.var / "admin-login.txt").read_text().split()
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(system.url("/accounts/login/"), timeout=10).read()
    token = next(c.value for c in jar if c.name == "csrftoken")
    data = urllib.parse.urlencode({"username": user, "password": password, "csrfmiddlewaretoken": token}).encode()
    request = urllib.request.Request(system.url("/accounts/login/"), data=data,
                                     headers={"Referer": system.url("/accounts/login/")})
    opener.open(request, timeout=10).read()
    return opener


def _workflow_status(address: str, chart_id: int) -> str:
    from temporalio.client import Client

    async def describe() -> str:
        client = await Client.connect(address)  # the chart's id names the deployment make run generated
        async for wf in client.list_workflows('WorkflowId STARTS_WITH "chart-"'):
            if wf.id.rsplit("-", 1)[-1] == str(chart_id):
                # A new database has no legacy cut: even a seeded chart's id names the deployment.
                assert re.fullmatch(rf"chart-[a-z][a-z0-9]*-{chart_id}", wf.id), wf.id
                return wf.status.name
        raise AssertionError(f"no workflow for chart #{chart_id}")

    return asyncio.run(describe())


@pytest.mark.integration
@pytest.mark.slow(50)
def test_make_run_serves_runs_the_demo_on_temporal_resumes_and_stops_without_leftovers(tmp_path):
    available = set(get_commands())  # the same apps as manage.py's (no Django start-up of its own)
    first = System(tmp_path, FAIRSCHED_DEMO_RATE="120")
    try:
        first.wait_for(lambda: first.get("/healthz")[0] == 200, 150, "/healthz")
        # The web answers a moment before every other process is ready and the summary printed.
        first.wait_for(lambda: "Fairsched is up:" in first.output(), 150, "the 'Fairsched is up' summary")
        out = first.output()
        assert "Fairsched is up:" in out and f"http://127.0.0.1:{first.port}/dashboard/" in out
        assert "Demo seeded: 6 orgs (1 held), 3 workflows, 1118 charts" in out
        assert "admin login: admin / " in out
        assert first.get("/admin/login/")[0] == 200
        opener = _login(first)
        assert first.get("/dashboard/", opener)[0] == 200
        assert first.get("/admin/rq/", opener)[0] == 200
        assert first.get("/admin/jobs/importjob/add/", opener)[0] == 200

        if {"runworker", "runscheduler"} <= set(available):
            done = first.wait_for(
                lambda: first.db("SELECT id FROM charts_chart WHERE state = 'succeeded' ORDER BY id LIMIT 3"),
                120, "three demo charts succeeded")
            # They really ran on this run's Temporal, one workflow per chart.
            # (The row turns final in the workflow's last activity, a moment before the workflow closes.)
            first.wait_for(lambda: _workflow_status(f"127.0.0.1:{first.temporal_port}", done[0][0]) == "COMPLETED",
                           15, "the chart's workflow to close as completed")
            assert first.db("SELECT count(*) FROM charts_chart WHERE state = 'running'")[0][0] > 0
            # The demo's pools at work: coding draws 1 of llm (8), auditing 2 of llm and 1 of gpu (4), and
            # Acme's ceiling in llm is 4. Sampled while the demo runs, no pool and no ceiling is ever over.
            assert "pools llm 8, gpu 4." in out
            for _ in range(10):
                llm, gpu, acme = first.db(
                    "SELECT sum(CASE w.name WHEN 'code' THEN 1 WHEN 'audit' THEN 2 ELSE 0 END), "
                    "sum(w.name = 'audit'), sum(CASE WHEN o.name = 'Acme Health' THEN "
                    "CASE w.name WHEN 'code' THEN 1 WHEN 'audit' THEN 2 ELSE 0 END ELSE 0 END) "
                    "FROM charts_chart c JOIN orgs_workflow w ON w.id = c.workflow_id JOIN orgs_org o ON o.id = c.org_id "
                    "WHERE c.state = 'running'")[0]
                assert (llm or 0) <= 8 and (gpu or 0) <= 4 and (acme or 0) <= 4, (llm, gpu, acme)
                time.sleep(0.5)
        # demo_load is submitting through chart_submit
        first.wait_for(lambda: first.db("SELECT count(*) FROM charts_chart WHERE external_id LIKE 'load-%'")[0][0],
                       60, "a chart from demo_load")
        leftovers = first.stop()
    finally:
        first.kill()
    assert leftovers == [], f"still running after SIGTERM: {leftovers}\n{first.output()[-3000:]}"
    # make itself dies of the SIGTERM once its child is done; runall stopped everything first.
    assert first.proc.returncode in (0, -signal.SIGTERM), first.output()[-3000:]
    assert first.output().rstrip().endswith("all stopped")
    assert len(first.seen) >= 8  # redis, temporal, worker, scheduler, rqworker, rqcron, web, demo_load...
    charts_before = first.db("SELECT count(*), sum(state = 'succeeded') FROM charts_chart")[0]

    # make run again: the same data, no second seed, the same admin login.
    second = System(tmp_path, var=first.var, FAIRSCHED_DEMO_LOAD="0")
    try:
        second.wait_for(lambda: second.get("/healthz")[0] == 200, 150, "/healthz after a restart")
        second.wait_for(lambda: "Fairsched is up:" in second.output(), 150, "the summary after a restart")
        out = second.output()
        assert "Demo not seeded: the database already has orgs." in out
        assert "(from " in out and "admin-login.txt" in out
        count, succeeded = second.db("SELECT count(*), sum(state = 'succeeded') FROM charts_chart")[0]
        assert count == charts_before[0] and succeeded >= charts_before[1]
        assert "demo_load |" not in out  # FAIRSCHED_DEMO_LOAD=0
        leftovers = second.stop()
    finally:
        second.kill()
    assert leftovers == [], f"still running after SIGTERM: {leftovers}\n{second.output()[-3000:]}"
