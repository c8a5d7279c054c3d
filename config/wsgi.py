"""WSGI entry point for the HTTP-only tier: ``gunicorn config.wsgi``.

Every HTTP page and the producer API answer here as they do under daphne
(``config.asgi``); WebSockets (``/ws/...``) need daphne. docs/deploying.md, "The API tier".
"""
from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from django.conf import settings  # noqa: E402

from common import notify  # noqa: E402

# As under daphne: no request waits on Redis for its notes to the scheduler.
notify.send_in_background()

if settings.SERVE_STATIC:  # as config.asgi does: the API docs page's files, without a proxy in front
    from django.contrib.staticfiles.handlers import StaticFilesHandler

    application = StaticFilesHandler(application)
