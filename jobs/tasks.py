"""rq entry points: thin adapters that call the services (enqueue by dotted path).

Each job runs in a work horse forked from ``rqworker``, which closes its database
connections before forking, so a job opens its own."""
from __future__ import annotations

import logging

from django.apps import apps
from django.utils import timezone
from rq import get_current_job

from fairsched.temporal import capacity
from jobs import due_webhooks, importing, services, webhooks

log = logging.getLogger(__name__)


def import_charts(import_id: int) -> dict:
    try:
        job = importing.import_run(import_id)
    except Exception as exc:
        log.exception("import #%s stopped", import_id)
        importing.import_mark_failed(import_id, f"{type(exc).__name__}: {exc}")
        raise
    return {"status": job.status, "created": job.created_count, "existing": job.existing_count,
            "errors": job.error_count}


def deliver_webhook(delivery_id: int) -> str:
    job = get_current_job()
    retry_in = job.get_retry_interval() if job is not None and job.should_retry else None
    delivery = webhooks.webhook_deliver(delivery_id=delivery_id, retry_in_s=retry_in)
    return delivery.status if delivery is not None else "deleted"


def sweep() -> dict:
    """Periodic (rq cron, jobs/cron.py): finished charts, clear-time moves and due warnings
    -> webhooks; imports whose worker stopped mid-way -> queued again."""
    result = webhooks.sweep()
    due = due_webhooks.sweep_due_states()
    revived = services.imports_revive()
    return {"finished": result.finished, "clear_time": result.clear_time, "due_state": due,
            "requeued": result.requeued, "imports_resumed": revived}


def check_capacity() -> dict:
    """Periodic (rq cron, jobs/cron.py): the live workers' activity slots vs the running charts,
    stored in Redis for the dashboard (``fairsched.temporal.capacity``)."""

    result = capacity.refresh()
    return {"known": result["known"], "running": result["running"], "slots": result["slots"],
            "short": result["short"]}


PURGE_BATCH = 5000


def purge_idempotency_keys() -> dict:
    """Periodic (rq cron, jobs/cron.py): delete every expired ``Idempotency-Key`` answer
    (docs/api.md#idempotency), in batches of ``PURGE_BATCH`` rows, each its own short
    transaction. The requests once purged at most 1,000 rows every 10 minutes per process:
    6,000 an hour against 360,000 stored an hour by one key at the default rate, each row a
    whole response. The model is the API's, a layer above this one: found by its name."""
    model = apps.get_model("api", "IdempotencyKey")
    now, deleted = timezone.now(), 0
    while True:
        expired = list(model.objects.filter(expires_at__lt=now).values_list("pk", flat=True)[:PURGE_BATCH])
        if expired:
            deleted += model.objects.filter(pk__in=expired).delete()[0]
        if len(expired) < PURGE_BATCH:
            return {"deleted": deleted}
