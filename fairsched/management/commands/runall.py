"""Placeholder for the one-command system (``make run``); replaced by the full supervisor."""
from __future__ import annotations

import os
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Migrate and serve the web app with daphne on PORT."

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        os.execv(sys.executable, [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(settings.PORT),
                                  "fairsched.asgi:application"])
