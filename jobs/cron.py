"""Periodic jobs for ``manage.py rqcron jobs.cron`` (one such process; the jobs are
idempotent, so a second one only does the work twice)."""
from rq import cron

from jobs import tasks

cron.register(tasks.sweep, "default", interval=5, job_timeout=300, result_ttl=60, failure_ttl=3600,
              name="webhook-sweep")
