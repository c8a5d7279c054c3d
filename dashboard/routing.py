"""WebSocket routes. The dashboard consumer is added by the dashboard app."""
from __future__ import annotations

websocket_urlpatterns: list = []
