"""Helpers every layer shares; no models, no imports of the apps.

``validation`` (input limits and their messages), ``states`` (a chart's states),
``notify`` (the Redis channel that wakes the scheduler), ``snapshot`` (the published
snapshot in Redis), ``live_updates`` (the dashboard's live-update protocol),
``clear_notes`` (what a clear-time says about unplanned work), ``middleware``
(request-size guards), ``waiting`` (waiting for Redis at start-up).
"""
