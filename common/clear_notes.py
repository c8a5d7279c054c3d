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
BLOCKED_POOLED = "a pool has no room for them"


def no_eta_note(unplanned: Mapping[str, int] | None, *, org_held: bool = False, pooled: bool = False) -> str | None:
    """``"held: no ETA"``, ``"3 paused: no ETA until resumed"``, ``"12 blocked: cost above the
    budget"`` (joined by ``"; "``), None when nothing is held, paused or blocked.

    ``org_held``: the counts are one org's and the org itself is held (all its charts
    wait for a weight), so its count adds nothing. ``pooled``: capacity pools are set up, so
    a chart is blocked when a pool (the budget is one) or its org's ceiling there is smaller
    than what it draws: ``"2 blocked: a pool has no room for them"`` (each chart says which,
    :func:`never_in_pool`)."""
    if not unplanned:
        return None
    parts = []
    held, paused, blocked = (int(unplanned.get(k) or 0) for k in KINDS)
    if held:
        parts.append("held: no ETA" if org_held else f"{held:,} held: no ETA")
    if paused:
        parts.append(f"{paused:,} paused: no ETA until resumed")
    if blocked:
        parts.append(f"{blocked:,} blocked: " + (BLOCKED_POOLED if pooled else "cost above the budget"))
    return "; ".join(parts) or None


# --- capacity pools (docs/scheduling.md, "Pools") -------------------------------------------
# One wording for the dashboard's Pools panel, the org pages, status.json and the API: why a
# chart waits for a pool or at its org's ceiling, and why a blocked chart never starts.

BUDGET_POOL = "default"


def pool_name(pool: str) -> str:
    """``"pool llm"``; the budget's pool is ``"pool default (the budget)"``."""
    return f"pool {pool} (the budget)" if pool == BUDGET_POOL else f"pool {pool}"


def pool_line(pool: str, capacity: int, in_use: int, head: str | None = None, short_of: list[str] | None = None) -> str:
    """A pool in the Pools panel: ``"waiting for pool llm: 8 of 8 in use — chart #123 of Acme at
    the head"`` when a chart waits for room in it (``head``: ``"chart #123 of Acme"``); when that
    chart waits for another pool it draws on too (``short_of``, not this one), this pool is kept
    for it: ``"pool llm: 1 of 2 in use — kept for chart #123 of Acme, which waits for pool gpu"``.
    Else its use."""
    use = f"{in_use:,} of {capacity:,} in use"
    if head and short_of and pool not in short_of:
        return f"{pool_name(pool)}: {use} — kept for {head}, which waits for {', '.join(map(pool_name, short_of))}"
    if head:
        return f"waiting for {pool_name(pool)}: {use} — {head} at the head"
    if capacity == 0:
        return f"{pool_name(pool)}: capacity 0: every chart that draws on it is blocked"
    if in_use > capacity:
        return (f"{pool_name(pool)}: {use}, over its capacity (it was lowered under running work): nothing "
                "that draws on it starts until running work drains below it")
    return f"{pool_name(pool)}: {use}"


def org_pool_use(pool: str, in_use: int, ceiling: int | None, minimum: int = 0) -> str:
    """An org's use of one pool: ``"llm 4 of 4 (ceiling)"``, ``"llm 1 of 4 (min 2)"``, ``"gpu 1"``."""
    text = f"{pool} {in_use:,}" if ceiling is None else f"{pool} {in_use:,} of {ceiling:,}"
    notes = []
    if ceiling is not None and in_use >= ceiling:
        notes.append("ceiling")
    if minimum:
        notes.append(f"min {minimum:,}")
    return f"{text} ({', '.join(notes)})" if notes else text


def org_pools_line(org_name: str, uses: list[str]) -> str:
    """``"Acme: llm 4 of 4 (ceiling), gpu 1"``."""
    return f"{org_name}: {', '.join(uses)}" if uses else f"{org_name}: nothing in use"


def waits_for_pool(pool: str, capacity: int, in_use: int) -> str:
    """A chart at the head of a pool, waiting for room: ``"waiting for pool llm (8 of 8 in use)"``."""
    return f"waiting for {pool_name(pool)} ({in_use:,} of {capacity:,} in use)"


def in_line_for_pool(pool: str, capacity: int, in_use: int) -> str:
    """A chart of the order behind a pool's head (head-of-line per pool: it draws on a pool
    whose head waits for room): ``"in line for pool llm (8 of 8 in use)"``."""
    return f"in line for {pool_name(pool)} ({in_use:,} of {capacity:,} in use)"


def waits_at_ceiling(pool: str, in_use: int, ceiling: int) -> str:
    """A chart whose org holds its ceiling in a pool: ``"at its ceiling in pool llm (4 of 4)"``."""
    return f"at its ceiling in {pool_name(pool)} ({in_use:,} of {ceiling:,})"


def never_in_pool(pool: str, units: int, capacity: int | None, ceiling: int | None = None) -> str:
    """Why a blocked chart never starts under the current settings (``scheduling.pools.Pools.never``):
    ``"pool gpu has no room for it: capacity 0"``, ``"pool gpu has no room for it: it draws 3 units,
    capacity 2"``, ``"pool llm has no room for it: it draws 5 units, its org's ceiling is 4"``;
    ``capacity`` None: the pool does not exist (removed while a cost still names it)."""
    where = f"{pool_name(pool)} has no room for it"
    if ceiling is not None:
        return f"{where}: it draws {units:,} units, its org's ceiling is {ceiling:,}"
    if capacity is None:
        return f"{where}: no such pool (removed)"
    if capacity == 0:
        return f"{where}: capacity 0"
    return f"{where}: it draws {units:,} units, capacity {capacity:,}"
