"""``/metrics``: the scrape target. Not public (docs/metrics.md, "Who may scrape"):

- with ``FAIRSCHED_METRICS_TOKEN`` set, only a request with ``Authorization: Bearer <token>``
  is answered (401 otherwise), from anywhere;
- without it, only a loopback client (``REMOTE_ADDR`` 127.0.0.0/8 or ::1) that came through
  no proxy: a request carrying ``X-Forwarded-For``, ``Forwarded`` or ``X-Real-IP`` is
  refused, and so is every request when ``DJANGO_BEHIND_PROXY=1`` (a reverse proxy on the
  same machine makes every visitor a loopback client: there, set the token).
"""
from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import exposition, generate_latest

from monitoring.collector import REGISTRY

# The classic text format (every Prometheus reads it; the names need no escaping).
CONTENT_TYPE = getattr(exposition, "CONTENT_TYPE_PLAIN_0_0_4", "text/plain; version=0.0.4; charset=utf-8")
PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def _loopback(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr.strip("[]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def refusal(request: HttpRequest) -> HttpResponse | None:
    """Why ``request`` may not read the metrics (the answer to send), or None."""
    token = settings.FAIRSCHED_METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        response = HttpResponse("metrics: a bearer token is needed\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if settings.FAIRSCHED_BEHIND_PROXY:
        return HttpResponse("metrics: set FAIRSCHED_METRICS_TOKEN to scrape behind a proxy\n", status=403,
                            content_type="text/plain")
    if not _loopback(request.META.get("REMOTE_ADDR", "")) or any(h in request.META for h in PROXY_HEADERS):
        return HttpResponse("metrics: loopback clients only (or set FAIRSCHED_METRICS_TOKEN)\n", status=403,
                            content_type="text/plain")
    return None


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = refusal(request)
    if refused is not None:
        return refused
    response = HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-store"
    return response
