"""django-rq's ``rqworker``, waiting for Redis first (start-up order never matters)."""
from __future__ import annotations

from django.conf import settings
from django_rq.management.commands.rqworker import Command as RqWorkerCommand

from common.waiting import wait_for_redis


class Command(RqWorkerCommand):
    help = (RqWorkerCommand.help or "Runs RQ workers.") + " Waits for Redis to answer first."

    def handle(self, *args, **options):
        wait_for_redis(settings.REDIS_URL)
        return super().handle(*args, **options)
