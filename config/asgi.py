"""ASGI entry point: ``daphne config.asgi:application``.

HTTP goes to Django; WebSockets (``/ws/...``) go through Channels with an origin
check on scheme, host and port (:mod:`config.wsorigin`) and session authentication.
"""
from __future__ import annotations

import os

from django.apps import apps
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
_own_process = not apps.ready  # daphne's, not a process that set Django up before (a test)
django_asgi_app = get_asgi_application()

from common.connections import pool_connections  # noqa: E402
from config import daphne_http  # noqa: E402

# daphne's status lines name every code (422, 429), and a multipart body reaches Django's 415.
daphne_http.configure()

if _own_process:
    # The web's PostgreSQL connections from a pool, not one opened a request
    # (common/connections.py; docs/deploying.md, "Deploying beyond one machine").
    pool_connections()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from common import notify  # noqa: E402
from dashboard.routing import websocket_urlpatterns  # noqa: E402
from config.wsorigin import SameOriginValidator  # noqa: E402

# A web process's requests run on one thread: none of them waits on Redis for its notes to
# the scheduler (common/notify.py, "the web's sender thread").
notify.send_in_background()

http_app = django_asgi_app
if settings.SERVE_STATIC:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    http_app = ASGIStaticFilesHandler(django_asgi_app)

application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
