"""What is said instead of a clear-time for work that will not run under the current settings.

Scenario contract v2: an org whose queued charts are all held, paused or blocked has no
clear-time (``org_clear_s`` null), and wherever a clear-time is shown such charts are
named, never summed up as "clear" or "done". One wording for every surface (dashboard,
org page, ``status.json``, admin, the ``org.clear_time_changed`` webhook), built here
from the per-org counts the scheduler publishes (``unplanned``).
"""
from __future__ import annotations

from collections.abc import Mapping

KINDS = ("held", "paused", "blocked")


def no_eta_note(unplanned: Mapping[str, int] | None, *, org_held: bool = False) -> str | None:
    """``"held: no ETA"``, ``"3 paused: no ETA until resumed"``, ``"12 blocked: cost above the
    budget"`` (joined by ``"; "``), None when nothing is held, paused or blocked.

    ``org_held``: the counts are one org's and the org itself is held (all its charts
    wait for a weight), so its count adds nothing."""
    if not unplanned:
        return None
    parts = []
    held, paused, blocked = (int(unplanned.get(k) or 0) for k in KINDS)
    if held:
        parts.append("held: no ETA" if org_held else f"{held:,} held: no ETA")
    if paused:
        parts.append(f"{paused:,} paused: no ETA until resumed")
    if blocked:
        parts.append(f"{blocked:,} blocked: cost above the budget")
    return "; ".join(parts) or None
