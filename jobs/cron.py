"""Periodic jobs for ``manage.py rqcron jobs.cron``: the webhook sweep, the worker-capacity
check and the purge of expired Idempotency-Key answers (one such process; the jobs are
idempotent, so a second one only does the work twice)."""
from rq import cron

from fairsched.temporal.capacity import CHECK_INTERVAL_S
from jobs import tasks

cron.register(tasks.sweep, "default", interval=5, job_timeout=300, result_ttl=60, failure_ttl=3600,
              name="webhook-sweep")
cron.register(tasks.check_capacity, "default", interval=CHECK_INTERVAL_S, job_timeout=60, result_ttl=60,
              failure_ttl=3600, name="worker-capacity")
cron.register(tasks.purge_idempotency_keys, "default", interval=60, job_timeout=600, result_ttl=60,
              failure_ttl=3600, name="idempotency-purge")
