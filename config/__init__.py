"""The Django project: settings, URLs, the ASGI entry point (``daphne config.asgi:application``),
the WebSocket origin check and the admin's date formats.

The top layer: it may import every app; no app imports it (they read ``django.conf.settings``).
The layers, bottom up (``docs/architecture.md``)::

    scheduling      the scheduling rules, pure Python (no Django)
    common              shared helpers: validation, chart states, notifications, snapshots,
                        the live-update protocol
    fairsched           the scheduler's settings, round state and audit models; scenario JSON
    orgs -> charts      the tenants and their work
    fairsched.engine    the live scheduler (reads orgs/charts, publishes through common)
    fairsched.temporal  workflows, activities, the worker
    jobs, dashboard     background jobs; the operator cockpit and org pages
    config              this package
"""
