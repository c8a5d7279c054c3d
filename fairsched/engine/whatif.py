"""What-if previews: each org's clear-time and at-risk count before and after one change
(a budget, an org's weight or hold, a cost), by the same ETA model on the same state.

Pure and synchronous: :func:`apply_change` makes the change on a :class:`LiveState` *that
is the caller's to spoil* (the scheduler runs it in a forked child, whose memory is its
own: :mod:`fairsched.engine.previews`); :func:`measure` is the ETA pass, its 90% bounds and
the due states (:func:`fairsched.engine.due_states.due_pass`) of a captured state, summed per org.
Nothing here writes, audits or touches the live order.

A change is applied exactly as the live queue applies it (:class:`FairQueue`'s
``set_weight``, ``set_cost``, ``set_budget``): a budget change re-ranks every org, done
here in bulk (the same keys as ``set_budget``'s org-by-org re-rank, which takes out and
re-inserts each key: seconds at 100k, against a sort here; ``tests/engine/test_whatif.py``
checks they agree).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from scheduling import eta_reader
from scheduling.queue import FairQueue
from scheduling.plan import gc_paused, unplanned_clear
from scheduling.pools import DEFAULT_POOL, Limit, Pools
from scheduling.sortedkeys import SortedKeys
from fairsched.engine.due_states import due_keys
from fairsched.engine.state import LiveState
from fairsched.engine.live_types import PassInput

KINDS = ("budget", "weight", "cost", "pool", "ceiling", "minimum")
POOL_KINDS = ("pool", "ceiling", "minimum")  # with capacity pools (docs/scheduling.md, "Pools")


class ChangeError(ValueError):
    """A change the state cannot take (an unknown org): the message names the parameter."""


@dataclass(frozen=True, slots=True)
class Change:
    """One change: ``budget`` (``value``), an org's ``weight`` (0 holds it) or the ``cost`` of
    (``org``, ``workflow`` by name); with capacity pools, a ``pool``'s capacity, or an org's
    ``ceiling`` (its max) or ``minimum`` in a ``pool``."""

    kind: str
    value: int
    org: int | None = None
    workflow: str | None = None
    pool: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "value": self.value}
        if self.org is not None:
            out["org"] = self.org
        if self.workflow is not None:
            out["workflow"] = self.workflow
        if self.pool is not None:
            out["pool"] = self.pool
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Change:
        kind = d.get("kind")
        if kind not in KINDS:
            raise ChangeError(f"kind: one of {', '.join(KINDS)}, not {kind!r}")
        value, org = d.get("value"), d.get("org")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ChangeError(f"value: a whole number >= 0, not {value!r}")
        needs_org = kind not in ("budget", "pool")
        if needs_org and (not isinstance(org, int) or isinstance(org, bool)):
            raise ChangeError(f"org: an org id, not {org!r}")
        wf = d.get("workflow")
        if kind == "cost" and (not isinstance(wf, str) or value < 1):
            raise ChangeError("workflow: a workflow name, and a cost of at least 1")
        pool = d.get("pool")
        if kind in POOL_KINDS and (not isinstance(pool, str) or not pool):
            raise ChangeError(f"pool: a pool's name, not {pool!r}")
        return cls(kind, value, org if needs_org else None, wf if kind == "cost" else None,
                   pool if kind in POOL_KINDS else None)


def rerank_all(queue: FairQueue) -> None:
    """Re-rank every org of ``queue`` at once, as ``set_budget`` does one org at a time: each
    org's charts arrive again oldest first from what its dispatched charts imply, and the
    order is rebuilt by one sort. Spoils nothing a preview reads; never call it on the live
    queue's entries from another thread (they are shared with its frozen copies)."""
    q = queue
    for e in q._entries.values():
        e.key = None
        e.state = ""
    for aside in q._aside.values():
        aside.clear()
    q._ordered_n = dict.fromkeys(q._weights, 0)
    keys: list[tuple] = []
    for org in q._weights:
        keys.extend(q._rank(org, insert=False))
    q._order = SortedKeys()
    q._order.bulk_load(keys)


def apply_change(state: LiveState, change: Change) -> None:
    """Make ``change`` on ``state``'s queue (the caller's own copy), as the live queue would."""
    q = state.queue
    if change.kind == "pool" and change.pool == DEFAULT_POOL:
        change = Change("budget", change.value)  # the pool default is the budget
    elif change.kind in POOL_KINDS:
        q.set_pools(changed_pools(q, change))
        return
    if change.kind == "budget":
        if change.value != q.budget:
            q._budget = change.value
            rerank_all(q)
        return
    org = str(change.org)
    if org not in q.weights:
        raise ChangeError(f"org: no org {change.org} in the scheduler's state")
    if change.kind == "weight":
        q.set_weight(org, change.value)
    else:
        q.set_cost(org, change.workflow, change.value)


def changed_pools(q: FairQueue, change: Change) -> Pools:
    """The queue's pools with a pool kind of ``change`` made: a pool's capacity (``default``:
    the budget), an org's ceiling (``value``) or minimum in a pool."""
    p = q.pools
    if p is None or change.pool not in p.capacity:
        raise ChangeError(f"pool: no pool {change.pool!r} in the scheduler's state")
    if change.kind == "pool":
        return Pools({**p.capacity, change.pool: change.value}, p.demands, p.limits)
    org = str(change.org)
    if org not in q.weights:
        raise ChangeError(f"org: no org {change.org} in the scheduler's state")
    old = p.limits.get((org, change.pool), Limit())
    new = Limit(change.value, old.min) if change.kind == "ceiling" else Limit(old.max, change.value)
    if new.max is not None and new.min > new.max:
        raise ChangeError(f"value: a minimum of {new.min} above the ceiling of {new.max}")
    return Pools(p.capacity, p.demands, {**p.limits, (org, change.pool): new})


@dataclass(frozen=True, slots=True)
class Measure:
    """One pass's answer to the preview's question: per org (id string) its clear-time
    (seconds from ``now``; None: its queued work is all held, paused or blocked) and how
    many of its charts are at risk or late; the whole backlog's clear-time, at ``budget``."""

    now: float
    clear_s: float | None
    orgs: dict[str, tuple[float | None, int]]
    budget: int = 0


def measure(captured: PassInput, now: float) -> Measure:
    """The configured ETA model's pass over ``captured`` at ``now``, with its 90% bounds and
    due states, summed per org (what the scheduler's ETA pass computes before its snapshot)."""
    with gc_paused():
        report = captured.eta_report(now)
        risky = at_risk_counts(captured, report.etas, now, captured.forecast.p90_finisher())
    return measured(captured, report, risky, now)


def measured(captured: PassInput, report, risky: dict[str, int], now: float) -> Measure:
    """The :class:`Measure` of a pass's ``report`` over ``captured`` and its charts at risk or
    late per org (``risky``: :func:`at_risk_counts`, or the due pass's counts: the ETA pass
    gives the previews its own, :mod:`fairsched.engine.eta_passes`)."""
    unplanned = captured.queue.unplanned_by_org()
    if unplanned:  # both models: an org whose work is all set aside has no clear-time, never 0
        report = unplanned_clear(report, unplanned, {str(r.org) for r in captured.running} | {
            o for o, n in captured.queue._ordered_n.items() if n})
    orgs: dict[str, tuple[float | None, int]] = {}
    for o in captured.orgs:
        key = str(o.id)
        orgs[key] = (report.org_clear_s.get(key, 0.0), risky.get(key, 0))
    unplanned = any(v[0] is None for v in orgs.values())
    return Measure(now, None if unplanned and not report.clear_s else report.clear_s, orgs, captured.queue.budget)


def at_risk_counts(captured: PassInput, etas: dict, now: float, p90) -> dict[str, int]:
    """Per org, its charts ``at_risk`` or ``late`` (:func:`scheduling.due.due_state`: the
    90% bound, or the ETA, after the due time; no ETA at all), without the warning levels
    :func:`~fairsched.engine.due_states.due_pass` also moves: the counts only, in one lean loop.
    ``tests/engine/test_whatif.py`` checks it against ``due_pass``'s counts."""
    due = captured.due
    out: dict[str, int] = {}
    if due is None or not (due.explicit or due.turnaround):
        return out
    explicit, turnaround = due.explicit, due.turnaround
    eta_at, eget, tget = eta_reader(etas), explicit.get, turnaround.get

    def count(org: str) -> None:
        out[org] = out.get(org, 0) + 1

    # one lean loop (no call per chart): O(charts), most of them without a due time or on time
    for pos, k, org, wf, _, due_s in due_keys(captured.queue, due, now):
        eta = eta_at(pos, k.id)
        if eta is not None and eta[1] <= due_s and (p90 is None or p90(org, wf, eta) <= due_s):
            continue
        out[org] = out.get(org, 0) + 1
    for kind in captured.aside.values():  # no ETA: at risk until due, late after
        for q in kind:
            if eget(int(q.id)) is not None or q.org in turnaround:
                count(q.org)
    for r in captured.running:
        org = str(r.org)
        at = eget(r.id)
        if at is None:
            t = tget(org)
            if t is None:
                continue
            at = r.created_at + t
        eta = etas.get(str(r.id))  # (a running chart's: the pass's head)
        if eta is None or eta[1] > at - now or (p90 is not None and p90(org, r.workflow, eta) > at - now):
            count(org)
    return out


def before_of(state: LiveState, now: float) -> Measure:
    """``state`` measured as it is: in a forked child (engine/previews.py), whose memory is
    a copy already, or on a state nothing else changes meanwhile."""
    return measure(state.capture(copy=False), now)


def after_of(state: LiveState, change: Change, now: float) -> Measure:
    """``change`` made on ``state`` (spoiled: the caller's copy), then measured. Without the
    cyclic collector, like the pass: a budget's re-rank makes a key per chart, and the full
    collections they set off walked the whole state (a budget's re-rank at 100k took twice
    as long with it)."""
    with gc_paused():
        apply_change(state, change)
    return measure(state.capture(copy=False), now)


def changes_nothing(state: LiveState, change: Change) -> bool:
    """``change`` leaves ``state`` as it is: the budget, weight or cost it already has."""
    q = state.queue
    if change.kind in POOL_KINDS:
        try:
            return changed_pools(q, change) == q.pools
        except ChangeError:
            return False
    if change.kind == "budget":
        return change.value == q.budget
    org = str(change.org)
    if change.kind == "weight":
        return q.weights.get(org) == change.value
    return q.cost_of(org, change.workflow) == change.value


def state_mark(state: LiveState, changes: int) -> tuple:
    """What tells whether ``state`` is still the one an ETA pass measured, in O(orgs + running
    charts): ``changes`` (the loop's count of the changes that send an event: an arrival, a
    dispatch, a finish, a control, a chart paused or moved) and what changes without one (the
    settings, an org's row and its turnaround, the duration estimates, a chart's own due time).
    Equal marks: the same order, the same running charts, the same model inputs."""
    q = state.queue
    return (weakref.ref(state), changes, state.config, tuple(state.orgs.values()), state.durations,
            state.due.changes, len(q), q.order_len, q.budget, tuple(q.weights.items()), dict(q.costs),
            tuple((r.id, r.started_at, r.cost) for r in state.running.values()))


def _iso(now: float, s: float | None) -> str | None:
    return None if s is None else datetime.fromtimestamp(now + s, tz=timezone.utc).isoformat()


def answer(change: Change, before: Measure, after: Measure) -> dict[str, Any]:
    """The preview's JSON (``/dashboard/whatif.json``): ISO times or null; ``now``: the time
    both were measured at."""
    now, then = before.now, after.now
    orgs = {}
    for key in sorted(set(before.orgs) | set(after.orgs), key=int):
        b = before.orgs.get(key, (0.0, 0))
        a = after.orgs.get(key, (0.0, 0))
        orgs[key] = {"clear_before": _iso(now, b[0]), "clear_after": _iso(then, a[0]),
                     "at_risk_before": b[1], "at_risk_after": a[1]}
    return {"change": change.to_json(), "now": _iso(now, 0.0), "orgs": orgs,
            "clear_before": _iso(now, before.clear_s), "clear_after": _iso(then, after.clear_s),
            "at_risk_before": sum(v[1] for v in before.orgs.values()),
            "at_risk_after": sum(v[1] for v in after.orgs.values())}
