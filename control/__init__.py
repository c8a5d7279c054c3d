"""The scheduler's control records (layer 4, docs/architecture.md): its settings, the
saved round state, the deployment id and the audit trail, and their services.

The Django app keeps the label ``fairsched`` (``control/apps.py``): its tables, migration
history, content types and permissions are those it had when it lived in ``fairsched/``."""
