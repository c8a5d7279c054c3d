"""WebSocket routes (wrapped by config.asgi in SameOriginValidator and AuthMiddlewareStack)."""
from __future__ import annotations

from django.urls import path

from dashboard import consumers

websocket_urlpatterns: list = [
    path("ws/dashboard/", consumers.DashboardConsumer.as_asgi()),
    path("ws/orgs/<slug:slug>/", consumers.OrgConsumer.as_asgi()),
]
