"""Writes for background jobs: start and resume imports (webhook writes live in
:mod:`jobs.webhooks`). Each queues its rq job when the transaction commits."""
from __future__ import annotations

import logging

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
        job.message = f"Resumed at {timezone.now():%Y-%m-%d %H:%M:%S} from row {job.next_row + 1}."
        job.save(update_fields=["status", "finished_at", "message"])
        transaction.on_commit(lambda: enqueue_import(pk))
    return job
