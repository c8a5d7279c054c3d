"""The contract's version 3 (docs/scheduling.md, "Pools: capacity is several things"):
the optional scenario keys ``pools``, ``costs[].pools`` and ``limits``, read into a
:class:`~scheduling.pools.Pools`, and the plan of a scenario that has any of them.

A scenario without them is version 2 and never comes here (its output is byte-identical
to what it was); :func:`is_pooled` tells which.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

import scheduling as core
from scheduling import Plan, QueuedChart, RunningChart
from scheduling.contract.fields import ScenarioError, as_int, as_list, as_obj, as_str, known_org, need, show
from scheduling.lanes import Durations
from scheduling.modes import Dispatch
from scheduling.plan import Columns
from scheduling.queue import FairQueue
from scheduling.pool_lanes import RunningUse, pool_etas
from scheduling.pools import CEILING, DEFAULT_POOL, RESERVED, Demand, Limit, Pools, Usage, Wait, demand_of, dispatch_walk


def is_pooled(d: Any) -> bool:
    """True if the scenario or trace dict uses a key of version 3."""
    if not isinstance(d, dict):
        return False
    if "pools" in d or "limits" in d:
        return True
    costs = d.get("costs")
    return isinstance(costs, list) and any(isinstance(c, dict) and "pools" in c for c in costs)


def parse_pools(d: Mapping, weights: Mapping[str, int], budget: int) -> Pools:
    """The pools (``default`` of capacity ``budget`` first), each pair's demand and the
    limits, every field checked: an unknown pool or org names its field."""
    capacity = {DEFAULT_POOL: budget}
    for i, p in enumerate(as_list(d.get("pools", []), "pools")):
        path = f"pools[{i}]"
        p = as_obj(p, path)
        pid = as_str(need(p, "id", path), f"{path}.id")
        if pid == DEFAULT_POOL:
            raise ScenarioError(f"{path}.id", "'default' is the budget's pool: set its capacity with \"budget\"")
        if not pid:
            raise ScenarioError(f"{path}.id", "must not be empty")
        if pid in capacity:
            raise ScenarioError(f"{path}.id", f"duplicate pool {show(pid)}")
        capacity[pid] = as_int(need(p, "capacity", path), f"{path}.capacity", 0)
    return Pools(capacity, _demands(d, weights, capacity), _limits(d, weights, capacity))


def _units(v: Any, path: str, capacity: Mapping[str, int]) -> Demand:
    units = as_obj(v, path)
    if not units:
        raise ScenarioError(path, "expected at least one pool")
    for p, u in units.items():
        if p not in capacity:
            raise ScenarioError(f"{path}.{p}", f"unknown pool {show(p)}")
        as_int(u, f"{path}.{p}", 1)
    return demand_of(units)


def _demands(d: Mapping, weights: Mapping[str, int], capacity: Mapping[str, int]) -> dict:
    demands: dict = {}
    for i, c in enumerate(as_list(d.get("costs", []), "costs")):
        path = f"costs[{i}]"
        c = as_obj(c, path)
        org = known_org(need(c, "org", path), f"{path}.org", weights)
        wf = as_str(need(c, "workflow", path), f"{path}.workflow", nullable=True)
        if ("cost" in c) == ("pools" in c):
            raise ScenarioError(path, "expected exactly one of cost, pools")
        if (org, wf) in demands:
            raise ScenarioError(path, f"duplicate cost of ({show(org)}, {show(wf)})")
        if "pools" in c:
            demands[(org, wf)] = _units(c["pools"], f"{path}.pools", capacity)
        else:
            demands[(org, wf)] = ((DEFAULT_POOL, as_int(c["cost"], f"{path}.cost", 1)),)
    return demands


def _limits(d: Mapping, weights: Mapping[str, int], capacity: Mapping[str, int]) -> dict:
    limits: dict = {}
    for i, item in enumerate(as_list(d.get("limits", []), "limits")):
        path = f"limits[{i}]"
        item = as_obj(item, path)
        org = known_org(need(item, "org", path), f"{path}.org", weights)
        pool = as_str(need(item, "pool", path), f"{path}.pool")
        if pool not in capacity:
            raise ScenarioError(f"{path}.pool", f"unknown pool {show(pool)}")
        if (org, pool) in limits:
            raise ScenarioError(path, f"duplicate limit of ({show(org)}, {show(pool)})")
        mx = item.get("max")
        mx = None if mx is None else as_int(mx, f"{path}.max", 0)
        mn = as_int(item.get("min", 0), f"{path}.min", 0)
        if mx is None and "min" not in item:
            raise ScenarioError(path, "expected max, min or both")
        if mx is not None and mn > mx:
            raise ScenarioError(f"{path}.min", f"must be <= max ({mx}), got {mn}")
        limits[(org, pool)] = Limit(mx, mn)
    return limits


def running_demands(d: Mapping, running: Sequence[RunningChart], pools: Pools) -> list[Demand]:
    """Each running chart's demand: its own ``pools`` (checked), its ``cost`` (in
    ``default``), else its pair's."""
    out = []
    for i, (r, raw) in enumerate(zip(running, d.get("running", []))):
        if "pools" in raw:
            out.append(_units(raw["pools"], f"running[{i}].pools", pools.capacity))
        elif raw.get("cost") is not None:
            out.append(((DEFAULT_POOL, r.cost),))
        else:
            out.append(pools.demand(r.org, r.workflow))
    return out


# --------------------------------------------------------------------- plan
def order_of(cols: Columns, queued: Sequence[QueuedChart], running: Sequence[RunningChart], pools: Pools, *,
             weights: Mapping[str, int], estimate: Durations, now: float, policies: dict | None) -> Plan:
    """The fair order, held, paused and blocked charts of the backlog, as version 2 gives
    them, with "blocked" meaning a chart that can never start under the pools
    (:meth:`Pools.never`). Its dispatch and ETAs are not the pools' (see :func:`plan`)."""
    pairs = set(zip(cols.orgs, cols.workflows)) | {(c.org, c.workflow) for c in cols.special.values()}
    costs = {pr: 2 if pools.never(pr[0], pools.demand(*pr)) else 1 for pr in pairs}
    if policies is None:
        return core.plan(cols, running, budget=1, weights=weights, costs=costs, estimate=estimate, now=now)
    q = FairQueue.from_backlog(list(queued), budget=pools.capacity[DEFAULT_POOL], weights=weights, estimate=estimate,
                               pools=pools, **policies)  # blocked by the pools, DRF under work
    return q.plan(running, now, estimate)


def plan(cols: Columns, queued: Sequence[QueuedChart], running: Sequence[RunningChart], run_demand: Sequence[Demand],
         pools: Pools, *, weights: Mapping[str, int], estimate: Durations, now: float,
         policies: dict | None) -> dict:
    """The plan of a pooled scenario as the contract's JSON (version 2's keys, plus
    ``pools`` and ``waiting``; docs/scheduling.md)."""
    running = [replace(r, demand=d) for r, d in zip(running, run_demand)]
    base = order_of(cols, queued, running, pools, weights=weights, estimate=estimate, now=now, policies=policies)
    where = {cid: i for i, cid in enumerate(cols.ids)}
    for i, c in cols.special.items():
        where[c.id] = i
    order = list(base.order)
    pair = [(cols.orgs[where[cid]], cols.workflows[where[cid]]) for cid in order]
    dem = [pools.demand(o, wf) for o, wf in pair]
    use = Usage()
    for r, d in zip(running, run_demand):
        use.take(r.org, d)
    in_use = dict(use.pool)
    rem = [max(0.0, r.started_at + estimate(r.org, r.workflow) - now) for r in running]
    if policies is not None and policies["dispatch"] is Dispatch.BACKFILL:
        started, starts, fins, waits = _backfill(base, order, pair, dem, pools, use)
    else:
        started, waits = dispatch_walk([(o, d) for (o, _), d in zip(pair, dem)], pools, use, whole=True)
        starts, fins = pool_etas([(o, d, float(estimate(o, wf))) for (o, wf), d in zip(pair, dem)],
                                 [RunningUse(r.org, d, x) for r, d, x in zip(running, run_demand, rem)], pools)
    etas = {r.id: {"start_s": 0.0, "finish_s": x} for r, x in zip(running, rem)}
    etas.update((cid, {"start_s": s, "finish_s": f}) for cid, s, f in zip(order, starts, fins))
    return {
        "order": order,
        "dispatch": [order[i] for i in started],
        "held": list(base.held),
        "paused": list(base.paused),
        "blocked": list(base.blocked),
        "etas": etas,
        "org_clear_s": _org_clear(weights, running, rem, pair, fins, base.org_unplanned),
        "org_unplanned": dict(base.org_unplanned),
        "clear_s": max([0.0, *rem, *fins]),
        "pools": _pool_rows(pools, in_use, order, dem, started, waits),
        "waiting": _waiting(order, waits, base.blocked, cols, where, pools),
    }


def _backfill(base, order: list, pair: list, dem: list, pools: Pools, use: Usage) -> tuple:
    """Under backfill, the reservations per pool (FairQueue's, :mod:`scheduling.pool_reserve`):
    the indices in ``order`` that start now, every chart's start and finish, and why each
    other chart waits (:func:`_reserved`)."""
    at = {cid: i for i, cid in enumerate(order)}
    started = sorted(at[cid] for cid in base.dispatch)
    fins = [base.etas[cid].finish_s for cid in order]
    starts = [base.etas[cid].start_s for cid in order]
    return started, starts, fins, _reserved(dem, started, pools, use, [o for o, _ in pair])


def _reserved(dem: list, started: list, pools: Pools, use: Usage, orgs: list) -> dict:
    """Under backfill, why each chart of the order that does not start now waits:
    ``ceiling`` if its org's units in a pool it draws on, the dispatch's counted, leave it
    no room under its ceiling there now (that ``pool``); else ``reserved`` (its reservation
    is later), its ``pool`` the first it draws on that has not its units free now, once the
    dispatch's charts are counted (None: its units are free now, but not for its duration,
    or it would delay an earlier reservation)."""
    free = {p: c - use.pool.get(p, 0) for p, c in pools.capacity.items()}
    held = dict(use.org)
    for i in started:
        for p, u in dem[i]:
            free[p] -= u
            held[(orgs[i], p)] = held.get((orgs[i], p), 0) + u
    now = set(started)
    out = {}
    for i, d in enumerate(dem):
        if i not in now:
            cap = None
            if pools.limits:
                cap = next((p for p, u in d if (m := pools.ceiling(orgs[i], p)) is not None
                            and held.get((orgs[i], p), 0) + u > m), None)
            out[i] = (Wait(CEILING, cap) if cap is not None
                      else Wait(RESERVED, next((p for p, u in d if free.get(p, 0) < u), None)))
    return out


def _org_clear(weights, running, rem, pair, fins, unplanned) -> dict:
    """Each org's last finish; None for an org with unplanned charts and nothing planned
    (version 2's rule, :func:`scheduling.plan.unplanned_clear`)."""
    org_clear = dict.fromkeys(weights, 0.0)
    for r, x in zip(running, rem):
        org_clear[r.org] = max(org_clear[r.org], x)
    for (o, _), f in zip(pair, fins):
        org_clear[o] = max(org_clear[o], f)
    planned = {r.org for r in running} | {o for o, _ in pair}
    for o in unplanned:
        if o not in planned:
            org_clear[o] = None
    return org_clear


def _pool_rows(pools: Pools, in_use: dict, order: list, dem: list, started: list, waits: dict) -> dict:
    """Per pool: its capacity, the units in use by running charts, the units the dispatch
    starts, and the first chart that waits for it (``blocked_by``)."""
    blocked_by: dict = {}
    for i, w in sorted(waits.items()):
        if w.reason == "pool":
            for p, _ in dem[i]:
                blocked_by.setdefault(p, order[i])
        elif w.reason == RESERVED and w.pool is not None:  # backfill: the first reserved for want of it
            blocked_by.setdefault(w.pool, order[i])
    starting: dict = {}
    for i in started:
        for p, u in dem[i]:
            starting[p] = starting.get(p, 0) + u
    return {p: {"capacity": cap, "in_use": in_use.get(p, 0), "starting": starting.get(p, 0),
                "blocked_by": blocked_by.get(p)} for p, cap in pools.capacity.items()}


def _waiting(order: list, waits: dict, blocked: Sequence[str], cols: Columns, where: dict, pools: Pools) -> dict:
    """Why each chart of the order that does not start now waits, and why each blocked
    chart never starts."""
    waiting = {order[i]: {"reason": w.reason, "pool": w.pool} for i, w in sorted(waits.items())}
    for cid in blocked:
        org = cols.orgs[where[cid]]
        w = pools.never(org, pools.demand(org, cols.workflows[where[cid]]))
        waiting[cid] = {"reason": w.reason, "pool": w.pool}
    return waiting
