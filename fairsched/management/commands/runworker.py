"""``manage.py runworker``: the Temporal worker for DemoChart and the chart-lifecycle activities.

SIGTERM or Ctrl-C stops it within ``FAIRSCHED_STOP_TIMEOUT_S`` (default 10 s): in-flight
activities get half of that (at most 5 s) to finish, then are cancelled; "worker stopped" is logged.
"""
from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from common.connections import keep_connections
from control.deployment import check_deployment
from fairsched.temporal.worker import main


class Command(BaseCommand):
    help = "Run a Temporal worker hosting DemoChart and the chart-lifecycle activities."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--task-queue", default=None, help="default: settings.FAIRSCHED_TASK_QUEUE")

    def handle(self, *args, **opts) -> None:
        check_deployment()
        # its activities write through one thread: one connection, kept (after the check: a
        # refusal leaves the process's settings as they were)
        keep_connections()
        main(address=settings.TEMPORAL_ADDRESS, namespace=settings.TEMPORAL_NAMESPACE,
             task_queue=opts["task_queue"] or settings.FAIRSCHED_TASK_QUEUE,
             stop_timeout_s=settings.FAIRSCHED_STOP_TIMEOUT_S, redis_url=settings.REDIS_URL)
