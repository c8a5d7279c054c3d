"""A stand-in for the scheduler's publication, for tests, the bench and demos.

``publish_from_db()`` reads the database through the scheduler's own reader
(:mod:`fairsched.engine.reader`: database → live state → ETA pass → snapshot),
stores the snapshot and tells the dashboards, exactly as the live scheduler does
after an ETA pass. It dispatches nothing and saves no rounds. The live system uses
``manage.py runscheduler``; this exists so the dashboard can be tested and measured
without it, on the very snapshot the scheduler would publish.
"""
from __future__ import annotations

from common import live_updates
from common import snapshot as snap
from fairsched.engine.reader import snapshot_from_db


def store_from_db(now: float | None = None) -> int:
    """Build and store a snapshot of the database (no broadcast); returns its ``seq``."""
    return snap.store(*snapshot_from_db(now))


def publish_from_db(now: float | None = None) -> int:
    """Build, store and broadcast a snapshot of the database; returns its ``seq``."""
    seq = store_from_db(now)
    live_updates.send(live_updates.SnapshotStored(seq=seq))
    return seq
