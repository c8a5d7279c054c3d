"""Writes for background jobs: start and resume imports (webhook writes live in
:mod:`jobs.webhooks`). Each queues its rq job when the transaction commits."""
from __future__ import annotations

import logging
from datetime import timedelta

import django_rq
import redis
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from jobs.importing import detect_format
from jobs.models import ImportJob, ImportStatus

log = logging.getLogger(__name__)


def enqueue_import(import_id: int) -> str | None:
    """Queue the import's rq job. On a Redis error the job says so (and 'Resume' re-queues it)."""
    try:
        job = django_rq.get_queue("default", commit_mode="auto").enqueue(
            "jobs.tasks.import_charts", import_id, job_timeout=6 * 3600, result_ttl=86400,
            failure_ttl=7 * 86400, description=f"import #{import_id}",
        )
    except redis.RedisError as exc:
        log.warning("import #%s not queued: %s", import_id, exc)
        ImportJob.objects.filter(pk=import_id).update(
            message=f"Not queued yet: Redis is unreachable ({exc}). Use 'Resume' once it is back."
        )
        return None
    ImportJob.objects.filter(pk=import_id).update(rq_job_id=job.id)
    return job.id


def import_create(*, filename: str, data: bytes, batch_size: int | None = None, user=None) -> ImportJob:
    """Store an uploaded file and queue its import."""
    if not data:
        raise ValidationError({"file": "file: the file is empty."})
    limit = settings.FAIRSCHED_IMPORT_MAX_BYTES
    if len(data) > limit:
        raise ValidationError({"file": f"file: {len(data):,} bytes is over the limit of {limit:,} "
                                       "(FAIRSCHED_IMPORT_MAX_BYTES); split the file."})
    batch = batch_size or settings.FAIRSCHED_IMPORT_BATCH
    if not 1 <= batch <= 10_000:
        raise ValidationError({"batch_size": f"batch_size: must be between 1 and 10000, got {batch}."})
    with transaction.atomic():
        job = ImportJob.objects.create(
            filename=filename[:255], format=detect_format(filename, data), data=data, batch_size=batch,
            created_by=user if getattr(user, "pk", None) else None,
        )
        transaction.on_commit(lambda: enqueue_import(job.pk))
    return job


def import_resume(*, import_job: ImportJob | int) -> ImportJob:
    """Queue an import again; it continues after the last committed batch."""
    pk = import_job.pk if isinstance(import_job, ImportJob) else import_job
    with transaction.atomic():
        job = ImportJob.objects.select_for_update().get(pk=pk)
        if job.status in (ImportStatus.SUCCEEDED, ImportStatus.PARTIAL):
            raise ValidationError({"status": f"import #{pk} is already {job.status}; nothing to resume."})
        if job.status == ImportStatus.FAILED and job.total_rows is None and job.message.startswith("Nothing"):
            raise ValidationError({"status": f"import #{pk}: the file cannot be read; upload a fixed file."})
        job.status = ImportStatus.PENDING
        job.finished_at = None
        job.heartbeat_at = timezone.now()
        job.message = f"Resumed at {job.heartbeat_at:%Y-%m-%d %H:%M:%S} from row {job.next_row + 1}."
        job.save(update_fields=["status", "finished_at", "heartbeat_at", "message"])
        transaction.on_commit(lambda: enqueue_import(pk))
    return job


MAX_AUTO_RESUMES = 3
WAITING = {"created", "queued", "deferred", "scheduled", "rate_limited", "ready_to_enqueue"}


def _rq_status(job_id: str) -> str:
    """The rq job's status, or "missing" (never queued, expired, or Redis lost it)."""
    from rq.exceptions import NoSuchJobError
    from rq.job import Job

    if not job_id:
        return "missing"
    try:
        status = Job.fetch(job_id, connection=django_rq.get_connection("default")).get_status(refresh=False)
    except NoSuchJobError:
        return "missing"
    return getattr(status, "value", status) or "missing"


def imports_revive(*, now=None, stale_s: float | None = None) -> list[int]:
    """Re-queue imports whose worker stopped mid-way (killed, out of memory, machine lost).

    An import is stalled when it is not final, has shown no sign of life for ``stale_s``
    (FAIRSCHED_IMPORT_STALE_S; a runner writes a heartbeat as it starts and after each
    batch) and its rq job is not waiting in a queue. It is re-queued and continues after
    its last committed batch; if the runner was only slow after all, the two share the
    remaining batches under the import's row lock, so no row is imported twice. After
    MAX_AUTO_RESUMES the import is marked failed (a file that kills its worker every time
    must not loop) and 'Resume' is left to a person. Returns the re-queued ids."""
    now = now or timezone.now()
    stale = timedelta(seconds=settings.FAIRSCHED_IMPORT_STALE_S if stale_s is None else stale_s)
    revived: list[int] = []
    candidates = ImportJob.objects.filter(status__in=[ImportStatus.PENDING, ImportStatus.RUNNING])
    for job in candidates.only("pk", "status", "rq_job_id", "heartbeat_at", "created_at"):
        last_sign = job.heartbeat_at or job.created_at
        if now - last_sign < stale:
            continue
        rq_status = _rq_status(job.rq_job_id)
        if rq_status in WAITING:
            continue  # queued behind other jobs: its turn comes
        with transaction.atomic():
            job = ImportJob.objects.select_for_update().get(pk=job.pk)
            if job.is_final or (job.heartbeat_at or job.created_at) != last_sign:
                continue  # it finished or moved meanwhile
            where = f"row {job.next_row + 1}" if job.total_rows is not None else "the start"
            why = f"its worker stopped (rq job {job.rq_job_id or '-'} is {rq_status}, no progress since {last_sign:%H:%M:%S})"
            if job.auto_resumes >= MAX_AUTO_RESUMES:
                job.status = ImportStatus.FAILED
                job.finished_at = now
                job.message = (f"Stopped at {where}: {why}, after {job.auto_resumes} automatic resume(s); "
                               f"not resumed again automatically. The {job.created_count} chart(s) created before that are in; "
                               f"'Resume' continues at {where}.")
                job.save(update_fields=["status", "finished_at", "message"])
                log.warning("import #%s given up: %s", job.pk, why)
                continue
            job.auto_resumes += 1
            job.status = ImportStatus.PENDING
            job.heartbeat_at = now
            job.message = f"Resumed automatically at {now:%Y-%m-%d %H:%M:%S} from {where}: {why}."
            job.save(update_fields=["auto_resumes", "status", "heartbeat_at", "message"])
            pk = job.pk
            transaction.on_commit(lambda pk=pk: enqueue_import(pk))
        log.info("import #%s re-queued from %s: %s", pk, where, why)
        revived.append(pk)
    return revived
