"""The snapshot the scheduler publishes after each ETA pass (schema: ``common/snapshot.py``).

Pure: builds the three JSON values from the live state and an ETA report;
the live loop stores them (``common.snapshot.store``) and tells the dashboards.
Fields beyond the documented schema: ``rounds`` (per org id ``[last, used]``, the
persistent round-robin's state), ``head`` (the round of the last normal-tier dispatch);
per org ``unplanned`` (its held, paused and blocked charts) and ``no_eta`` (what to say
about them, :mod:`common.clear_notes`; its ``clear_s``/``clear_at`` are null when
nothing of it is planned); the same two for the whole queue; and ``waiting`` (why
nothing starts although budget is free: the head of the order does not fit).
"""
from __future__ import annotations

from array import array
from datetime import datetime, timezone
from typing import Any, Callable

from common.clear_notes import no_eta_note
from scheduling import BLOCKED, HELD, PAUSED, Eta, EtaReport, eta_reader
from scheduling.due import AT_RISK, LATE
from scheduling.pools import CEILING, POOL, Usage, dispatch_walk
from scheduling.rules import is_held
from fairsched.engine.due_states import DueResult, Flagged, due_pass
from fairsched.engine.order_rows import NAN, NO_ROUND, LookedUp, Rows
from fairsched.engine.state import LiveState
from fairsched.engine.live_types import PassInput
from fairsched.temporal.shared import workflow_id


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def waiting(state: LiveState | PassInput) -> dict[str, Any] | None:
    """Why nothing starts although budget is free: the head of the order costs more than
    what is free (head-of-line: nothing cheaper skips ahead, so dispatch waits for
    running work to finish). None when dispatch is not waiting for that, and with capacity
    pools (the budget is one of several: :func:`pool_summary` names each pool's head)."""
    queue = state.queue
    if queue.pools is not None:
        return None  # with pools: each pool's head in the snapshot's ``pools`` (pool_summary)
    used = sum(r.cost for r in (state.running.values() if isinstance(state.running, dict) else state.running))
    free = queue.budget - used
    if not queue.order_len or free == 0:
        return None
    if free < 0:
        return {"chart": None, "free": free, "text": f"running cost {used} is above the budget "
                f"{queue.budget} (it was lowered): nothing starts until running work drains below it"}
    cid, (org_id, workflow), _ = next(iter(queue.walk()))
    cost = queue.cost_of(org_id, workflow)
    if cost <= free:
        return None
    orgs = state.orgs.values() if isinstance(state.orgs, dict) else state.orgs
    org = next((o for o in orgs if o.id == int(org_id)), None)
    name = org.name if org else org_id
    return {"chart": int(cid), "org": int(org_id), "org_name": name,
            "workflow": workflow, "cost": cost, "free": free, "external_id": state.external_ids.get(int(cid)),
            "text": f"next: #{cid} ({name}, {workflow}, cost {cost}) waits for {cost} free; {free} free"}


_NO_DUE = (None, None, None)


def _ordered_rows(state: PassInput, etas: dict[str, Eta], p90: Callable | None, due: DueResult) -> Rows:
    """The rows of the fair order, in order, as columns (:mod:`fairsched.engine.order_rows`)."""
    cost_of = state.queue.cost_of
    ext = state.external_ids
    dues = due.by_chart
    rows = Rows()
    cols = rows.cols
    a_id, a_org, a_wf, a_cost, a_round = (cols.id.append, cols.org.append, cols.workflow.append, cols.cost.append,
                                          cols.round.append)
    a_start, a_fin, a_p90 = cols.start.append, cols.finish.append, cols.p90.append
    pairs: dict = {}  # (org, workflow) -> (org id, cost)
    # walk() reads the order's keys (immutable), never the shared mutable entries.
    eta_at = eta_reader(etas)
    for pos, (cid, pair, rnd) in enumerate(state.queue.walk()):
        i = int(cid)
        oc = pairs.get(pair)
        if oc is None:
            oc = pairs[pair] = (int(pair[0]), cost_of(*pair))
        a_id(i)
        a_org(oc[0])
        a_wf(pair[1])
        a_cost(oc[1])
        a_round(NO_ROUND if rnd is None else rnd)
        eta = eta_at(pos, cid)
        if eta is None:
            a_start(NAN)
            a_fin(NAN)
            a_p90(NAN)
        else:
            a_start(eta[0])
            a_fin(eta[1])
            a_p90(p90(pair[0], pair[1], eta) if p90 else NAN)
    # the due states, as the pass left them: columns aligned with the order (engine/due_states.py)
    if len(dues.due) != len(cols):
        raise ValueError(f"due states for {len(dues.due)} charts, not the order's {len(cols)}")
    cols.due, cols.due_state, cols.slack = dues.due, dues.state, dues.slack
    cols.ext = LookedUp(cols.id, ext.get)  # each read when its page is written, not held
    return rows


def _aside_rows(state: PassInput, due: DueResult) -> tuple[list[tuple], dict[int, dict[str, int]]]:
    """The rows of the held, paused and blocked charts, and how many of each per org."""
    cost_of = state.queue.cost_of
    ext = state.external_ids
    rows: list[tuple] = []
    unplanned: dict[int, dict[str, int]] = {}
    for aside in (HELD, PAUSED, BLOCKED):
        for q in state.aside[aside]:
            counts = unplanned.setdefault(int(q.org), dict.fromkeys((HELD, PAUSED, BLOCKED), 0))
            counts[aside] += 1
            i = int(q.id)
            rows.append((i, None, int(q.org), q.workflow, cost_of(q.org, q.workflow), None, q.priority, aside,
                         ext.get(i), None, None, None) + due.by_chart.extra.get(i, _NO_DUE))
    return rows, unplanned


def _running_rows(state: PassInput, etas: dict[str, Eta], now: float, p90: Callable | None,
                  due: DueResult) -> tuple[list[dict[str, Any]], dict[int, int], dict[int, int]]:
    """The rows of the running charts (oldest first), and the cost used and charts running per org."""
    rows: list[dict[str, Any]] = []
    used_by_org: dict[int, int] = {}
    running_by_org: dict[int, int] = {}
    for r in sorted(state.running, key=lambda r: (r.started_at, r.id)):
        eta = etas.get(str(r.id))
        rows.append({
            "id": r.id, "org": r.org, "workflow": r.workflow, "cost": r.cost, "external_id": r.external_id,
            "started_at": iso(r.started_at), "elapsed_s": max(0.0, now - r.started_at),
            "expected_s": state.durations(str(r.org), r.workflow),
            "finish_s": eta.finish_s if eta else 0.0, "workflow_id": workflow_id(r.id), "run_id": r.run_id,
            "p90_s": p90(str(r.org), r.workflow, eta) if eta and p90 else None,
            **dict(zip(("due_s", "due_state", "slack_s"), due.by_chart.extra.get(r.id, _NO_DUE))),
        })
        used_by_org[r.org] = used_by_org.get(r.org, 0) + r.cost
        running_by_org[r.org] = running_by_org.get(r.org, 0) + 1
    return rows, used_by_org, running_by_org


def _org_rows(state: PassInput, report: EtaReport, now: float, unplanned: dict[int, dict[str, int]],
              used: int, used_by_org: dict[int, int], running_by_org: dict[int, int],
              due: DueResult) -> list[dict[str, Any]]:
    """One row per org, by name: its counts, its shares and its clear-time."""
    active_weight = sum(o.weight for o in state.orgs
                        if state.queued_by_org.get(o.id, 0) or running_by_org.get(o.id, 0))
    rows = []
    for o in sorted(state.orgs, key=lambda o: (o.name, o.id)):
        clear = report.org_clear_s.get(str(o.id), 0.0)
        aside = unplanned.get(o.id)
        active = state.queued_by_org.get(o.id, 0) or running_by_org.get(o.id, 0)
        rows.append({
            "id": o.id, "name": o.name, "slug": o.slug, "weight": o.weight, "held": is_held(o.weight),
            "queued": state.queued_by_org.get(o.id, 0), "running": running_by_org.get(o.id, 0),
            "used_cost": used_by_org.get(o.id, 0),
            "share_budget": round(used_by_org.get(o.id, 0) / used, 4) if used else 0.0,
            "share_weight": round(o.weight / active_weight, 4) if active and active_weight else 0.0,
            "clear_s": clear, "clear_at": None if clear is None else iso(now + clear),
            "unplanned": aside or {}, "no_eta": no_eta_note(aside, org_held=is_held(o.weight)),
            "turnaround_s": o.turnaround_s, "due": due.orgs.get(o.id, {}),
        })
    return rows


def _snapshot(state: PassInput, report: EtaReport, now: float, used: int,
              org_rows: list[dict[str, Any]], running_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The snapshot's summary: counters, clear-time, orgs, running charts, rounds."""
    queue = state.queue
    return {
        "version": 1, "generated_at": iso(now), "now": now,
        "budget": state.budget, "used": used,
        "policies": {"share": queue.share.value, "quantum_s": queue.quantum_s, "dispatch": queue.dispatch_policy.value},
        "counters": {"queued": state.queued, "ordered": queue.order_len, "running": len(state.running),
                     "held": len(state.aside[HELD]), "paused": len(state.aside[PAUSED]),
                     "blocked": len(state.aside[BLOCKED])},
        "clear_s": report.clear_s, "clear_at": iso(now + report.clear_s),
        "orgs": org_rows, "running": running_rows, "head": queue.head,
        "rounds": {org: list(lu) for org, lu in queue.round_state().items()},
        "no_eta": no_eta_note({k: len(state.aside[k]) for k in (HELD, PAUSED, BLOCKED)}),
        "waiting": waiting(state),
        **pool_summary(state),
    }


def pool_summary(state: PassInput) -> dict[str, Any]:
    """With capacity pools (docs/scheduling.md, "Pools"): ``pools``, each pool's capacity,
    units in use and the chart at the head that waits for it (``blocked_by``: the dispatch
    walk's first chart with no room there, null if none), and ``org_pools``, each org's
    units in use per pool against its ceiling and minimum, and its first chart waiting at
    that ceiling. Nothing without pools."""
    pools = state.queue.pools
    if pools is None:
        return {}
    use = Usage()
    for r in state.running:
        use.take(str(r.org), pools.held(r))
    held = {"pool": dict(use.pool), "org": dict(use.org)}
    walked: list = []

    def charts():
        for cid, (org, wf), _ in state.queue.walk():
            d = pools.demand(org, wf)
            walked.append((cid, org, d))
            yield org, d

    _, waits = dispatch_walk(charts(), pools, use)
    blocked_by: dict[str, str] = {}
    at_ceiling: dict[tuple[str, str], str] = {}
    for i, w in sorted(waits.items()):
        cid, org, d = walked[i]
        if w.reason == POOL:
            for p, _ in d:
                blocked_by.setdefault(p, cid)
        elif w.reason == CEILING:
            at_ceiling.setdefault((org, w.pool), cid)
    orgs: dict[str, dict] = {}
    for (org, p), units in held["org"].items():
        orgs.setdefault(org, {})[p] = units
    for (org, p) in pools.limits:
        orgs.setdefault(org, {}).setdefault(p, 0)
    return {
        "pools": [{"name": p, "capacity": c, "in_use": held["pool"].get(p, 0),
                   "blocked_by": int(blocked_by[p]) if p in blocked_by else None} for p, c in pools.capacity.items()],
        "org_pools": {org: {p: {"in_use": units, "max": pools.ceiling(org, p),
                                "min": (pools.limits.get((org, p)).min if (org, p) in pools.limits else 0),
                                "waiting_at_ceiling": int(at_ceiling[(org, p)]) if (org, p) in at_ceiling else None}
                            for p, units in sorted(per.items())} for org, per in orgs.items()},
    }


def _due_summary(due: DueResult) -> dict[str, Any]:
    """The snapshot's ``due``: counts over all orgs, each org's, the Due panel's charts (at
    risk or late, least slack first, :data:`fairsched.engine.due_states.TOP_CHARTS` of them) and
    ``total``, how many are at risk or late in all (the list's "100 of 861")."""
    counts = due.counts()
    return {"counts": counts, "orgs": {str(o): c for o, c in due.orgs.items()}, "charts": due.top(),
            "total": counts[AT_RISK] + counts[LATE]}


def _per_org(org_rows: list[dict[str, Any]], order_rows: Rows,
             running_rows: list[dict[str, Any]], due: DueResult) -> dict[int, dict]:
    """Each org's row and its charts (:class:`Rows`): its order rows, then its running rows."""
    idx: dict[int, array] = {row["id"]: array("q") for row in org_rows}
    for i, org in enumerate(order_rows.cols.org):  # each org's rows of the order: their indexes
        got = idx.get(org)
        if got is not None:
            got.append(i)
    tails: dict[int, list] = {org: [] for org in idx}
    for t in order_rows.tail:  # then its charts set aside
        if t[2] in tails:
            tails[t[2]].append(t)
    for row in running_rows:  # then its running charts
        if row["org"] in tails:
            tails[row["org"]].append({**row, "state": "running"})
    return {row["id"]: {"org": row, "charts": Rows(order_rows.cols, idx[row["id"]], tails[row["id"]]),
                        # each org's at-risk and late charts, their dicts made page by page when stored
                        # (at 200k queued, 115k of them late, the dicts were 31 MB of the pass's 147 MB)
                        "flagged": due.flagged.get(row["id"]) or Flagged(row["id"])}
            for row in org_rows}


def build_snapshot(state: LiveState | PassInput, report: EtaReport, now: float,
                   p90: Callable | None = None, due: DueResult | None = None) -> tuple[dict, Rows, dict[int, dict]]:
    """``(snapshot, order_rows, per_org)`` for :func:`common.snapshot.store`. ``p90``
    (org, workflow, Eta) -> seconds adds each chart's 90% finish bound as ``p90_s``.

    Reads only a :class:`PassInput` (a :class:`LiveState` is captured first), so the
    live loop runs it in a thread on a copy while it keeps dispatching."""
    if isinstance(state, LiveState):
        state = state.capture()
    if due is None:
        due = due_pass(state, report.etas, now, p90)
    order_rows = _ordered_rows(state, report.etas, p90, due)
    aside_rows, unplanned = _aside_rows(state, due)
    order_rows.tail.extend(aside_rows)
    running_rows, used_by_org, running_by_org = _running_rows(state, report.etas, now, p90, due)
    used = sum(used_by_org.values())
    org_rows = _org_rows(state, report, now, unplanned, used, used_by_org, running_by_org, due)
    snapshot = _snapshot(state, report, now, used, org_rows, running_rows)
    snapshot["due"] = _due_summary(due)
    return snapshot, order_rows, _per_org(org_rows, order_rows, running_rows, due)
