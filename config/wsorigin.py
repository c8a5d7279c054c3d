"""The WebSocket origin check: scheme, host and port.

Channels' ``AllowedHostsOriginValidator`` compares the ``Origin`` header's host with
``ALLOWED_HOSTS`` and ignores the port, so any page served from the same host on
another port (another app on the same machine) could open a dashboard socket with
the operator's cookies. Here a socket is accepted only when its ``Origin`` is

* the origin the socket itself was opened on (same scheme family, same ``Host``
  header including the port, a host in ``ALLOWED_HOSTS``), or
* listed in ``FAIRSCHED_WS_ALLOWED_ORIGINS`` (``scheme://host[:port]``, ``*.`` for
  subdomains; it defaults to ``DJANGO_CSRF_TRUSTED_ORIGINS``).

A socket without an ``Origin`` header (no browser sends one) is refused too.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
WEB_SCHEME = {"ws": "http", "wss": "https", "http": "http", "https": "https"}


def _origin(value: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin, lower-case, with the scheme's default port."""
    try:
        parts = urlsplit(value.strip())
        scheme, host, port = parts.scheme.lower(), (parts.hostname or "").lower(), parts.port
    except ValueError:  # a port out of range, a malformed IPv6 literal
        return None
    if scheme not in ("http", "https") or not host:
        return None
    return scheme, host, port or DEFAULT_PORTS[scheme]


def _host_header(value: str, scheme: str) -> tuple[str, int] | None:
    host, port = split_domain_port(value.strip().lower())
    if not host:
        return None
    try:
        number = int(port) if port else DEFAULT_PORTS[scheme]
    except ValueError:
        return None
    return host, number


def _listed(origin: tuple[str, str, int], allowed: list[str]) -> bool:
    scheme, host, port = origin
    for entry in allowed:
        if entry.strip() == "*":
            return True
        pattern = _origin(entry.replace("://*.", "://wildcard."))
        if pattern is None or pattern[0] != scheme or pattern[2] != port:
            continue
        if "://*." in entry:
            suffix = pattern[1][len("wildcard"):]  # ".example.com"
            if host.endswith(suffix):
                return True
        elif pattern[1] == host:
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = {k.lower(): v for k, v in scope.get("headers", [])}
    raw_origin = headers.get(b"origin")
    if raw_origin is None:
        return False
    origin = _origin(raw_origin.decode("latin1"))
    if origin is None:
        return False
    if _listed(origin, list(settings.FAIRSCHED_WS_ALLOWED_ORIGINS)):
        return True
    socket_scheme = WEB_SCHEME.get(scope.get("scheme") or "ws", "http")
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy and headers.get(b"x-forwarded-proto", b"").decode("latin1").lower() == "https":
        socket_scheme = "https"  # TLS ends at the proxy; the browser's page is https
    host = _host_header(headers.get(b"host", b"").decode("latin1"), origin[0])
    allowed_hosts = settings.ALLOWED_HOSTS or (["localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])
    if host is None or not validate_host(host[0], allowed_hosts):
        return False
    return origin[0] == socket_scheme and origin[1].strip("[]") == host[0].strip("[]") and origin[2] == host[1]


class SameOriginValidator:
    """ASGI middleware: a WebSocket whose ``Origin`` fails :func:`origin_allowed` is denied
    (closed before the handshake completes, as channels' own validators do)."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)
