"""django-rq's ``rqcron``, waiting for Redis first (start-up order never matters)."""
from __future__ import annotations

from django.conf import settings
from django_rq.management.commands.rqcron import Command as RqCronCommand

from common.waiting import wait_for_redis


class Command(RqCronCommand):
    help = (RqCronCommand.help or "Runs the RQ cron scheduler.") + " Waits for Redis to answer first."

    def handle(self, *args, **options):
        wait_for_redis(settings.REDIS_URL)
        return super().handle(*args, **options)
