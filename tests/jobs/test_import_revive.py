"""An import whose rq worker is killed mid-way is re-queued by the sweep and finishes,
every row imported exactly once; imports that are only waiting are left alone."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import django_rq
import psutil
import pytest
from django.utils import timezone

from charts.models import Chart
from jobs import tasks
from jobs.models import ImportJob, ImportStatus
from jobs.services import MAX_AUTO_RESUMES, import_create, imports_revive
from tests.conftest import ARTIFACTS
from tests.factories import make_org, make_workflow

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(n: int) -> bytes:
    lines = ["org,workflow,external_id"] + [f"acme,code,x{i}" for i in range(n)]
    return ("\n".join(lines) + "\n").encode()


def _start_rqworker(db_url: str, redis_url: str) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": redis_url, "FAIRSCHED_LOG_LEVEL": "INFO"}
    env.pop("FAIRSCHED_CHANNEL_LAYER", None)
    log = open(ARTIFACTS / "rqworker-killed.log", "ab")
    return subprocess.Popen([sys.executable, "manage.py", "rqworker", "default"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _kill_tree(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    for p in family:
        p.send_signal(signal.SIGKILL)
    psutil.wait_procs(family, timeout=10)
    proc.wait(10)


def test_a_worker_killed_mid_import_is_resumed_by_the_sweep_and_no_row_is_imported_twice(
    test_db_url, redis_url, run_jobs
):
    make_org("Acme")
    make_workflow("code")
    total = 5_000  # 100 batches: the worker is killed after 10, with 90 still to go
    job = import_create(filename="big.csv", data=_rows(total), batch_size=50)
    assert job.pk and ImportJob.objects.get(pk=job.pk).rq_job_id

    worker = _start_rqworker(test_db_url, redis_url)
    try:
        deadline = time.monotonic() + 90
        while True:
            done = ImportJob.objects.get(pk=job.pk).next_row
            if done >= 500:
                break
            assert worker.poll() is None, "the rq worker exited"
            assert time.monotonic() < deadline, f"the import never got going (next_row={done})"
            time.sleep(0.02)
        _kill_tree(worker)  # the worker and its work horse (a session of its own), mid-batch
    finally:
        _kill_tree(worker)

    job.refresh_from_db()
    assert job.status == ImportStatus.RUNNING and 0 < job.next_row < total, (job.status, job.next_row)
    assert Chart.objects.count() == job.created_count == job.next_row  # whole batches only

    # The sweep is what the rq cron runs every few seconds; a stale limit of 0 stands for the wait.
    assert imports_revive(stale_s=3600) == []  # it showed life moments ago: not stale yet
    assert tasks.sweep()["imports_resumed"] == []  # the periodic job, with the default limit
    assert imports_revive(stale_s=0) == [job.pk]
    job.refresh_from_db()
    assert (job.status, job.auto_resumes) == (ImportStatus.PENDING, 1)
    assert "Resumed automatically" in job.message and "its worker stopped (rq job" in job.message

    run_jobs()
    job.refresh_from_db()
    assert (job.status, job.next_row, job.created_count, job.error_count) == (ImportStatus.SUCCEEDED, total, total, 0)
    assert Chart.objects.count() == total
    assert Chart.objects.values("external_id").distinct().count() == total


def test_waiting_and_living_imports_are_left_alone_and_a_repeat_killer_is_given_up(redis_url):
    make_org("Acme")
    make_workflow("code")
    old = timezone.now() - timedelta(hours=1)

    # Queued behind other jobs for an hour: its rq job is still waiting, so it is not touched.
    waiting = import_create(filename="w.csv", data=_rows(3))
    ImportJob.objects.filter(pk=waiting.pk).update(created_at=old)
    # Running, with a heartbeat a moment ago.
    alive = import_create(filename="a.csv", data=_rows(3))
    ImportJob.objects.filter(pk=alive.pk).update(status=ImportStatus.RUNNING, heartbeat_at=timezone.now())
    # Never reached Redis (it was down at upload): re-queued.
    lost = import_create(filename="l.csv", data=_rows(3))
    ImportJob.objects.filter(pk=lost.pk).update(rq_job_id="", created_at=old)
    # Killed every time it ran.
    killer = import_create(filename="k.csv", data=_rows(3))
    ImportJob.objects.filter(pk=killer.pk).update(status=ImportStatus.RUNNING, heartbeat_at=old, next_row=1,
                                                  total_rows=3, auto_resumes=MAX_AUTO_RESUMES)
    django_rq.get_queue("default").empty()
    waiting_job = django_rq.get_queue("default").enqueue("jobs.tasks.import_charts", waiting.pk)
    ImportJob.objects.filter(pk=waiting.pk).update(rq_job_id=waiting_job.id)

    assert imports_revive() == [lost.pk]
    statuses = dict(ImportJob.objects.values_list("pk", "status"))
    assert statuses == {waiting.pk: "pending", alive.pk: "running", lost.pk: "pending", killer.pk: "failed"}
    lost.refresh_from_db()
    killer.refresh_from_db()
    assert lost.rq_job_id and lost.auto_resumes == 1 and "rq job - is missing" in lost.message
    assert f"after {MAX_AUTO_RESUMES} automatic resume(s)" in killer.message
    assert "'Resume' continues at row 2" in killer.message and killer.finished_at is not None
