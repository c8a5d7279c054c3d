"""rq entry points: thin adapters that call the services (enqueue by dotted path).

Each job runs in a work horse forked from ``rqworker``, which closes its database
connections before forking, so a job opens its own."""
from __future__ import annotations

import logging

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
