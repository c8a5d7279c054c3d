"""The JSON contract <-> the pure core.

``plan(scenario) -> dict`` and ``simulate(trace, policy="wrr") -> dict``, the
JSON formats of docs/scheduling.md.
Bad input raises :class:`ScenarioError` whose message is one line naming the
field path and the value, e.g. ``queued[3].org: unknown org '9'``.
No Django here: the management commands and the live scheduler call this.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from itertools import compress
from operator import attrgetter, itemgetter
from typing import Any, Iterable, Mapping, Sequence

import scheduling as core
from scheduling import DEFAULT_AVG_S, ById, Durations, Plan, QueuedChart, RunningChart
from scheduling.contract.fields import (ScenarioError, as_bool, as_int, as_list, as_num, as_obj, as_str, known_org,
                               need, parse_ts, show, to_iso)
from scheduling.contract import pool_scenario as pooled
from scheduling.modes import Dispatch, EtaModel, Policy, Share
from scheduling.queue import FairQueue
from scheduling.plan import Columns, columns, gc_paused
from scheduling.share import DEFAULT_QUANTUM_S
from scheduling.contract.simulator import ETA_MODELS, POLICIES, Arrival, Event, SimResult
from scheduling.contract.pool_sim import simulate_pools
from scheduling.contract.simulator import simulate as core_simulate

__all__ = [
    "Scenario", "Trace", "parse_scenario", "parse_columns", "parse_queued_chart", "parse_trace", "plan",
    "plan_to_json", "simulate", "sim_to_json", "dump_scenario",
]

# ------------------------------------------------------------------ parsing
@dataclass(frozen=True, slots=True)
class Scenario:
    """A parsed scenario, in core values (epoch seconds)."""

    now: float
    budget: int
    weights: dict[str, int]
    costs: dict[tuple[str, str | None], int]
    durations: Durations
    running: list[RunningChart]
    queued: list[QueuedChart]
    policies: dict | None = None  # share, quantum_s, dispatch when any is given


def parse_policies(d: Mapping) -> dict | None:
    """The optional ``share`` ("charts" | "work", as :class:`Share`), ``quantum_s`` (> 0)
    and ``dispatch`` ("strict" | "backfill", as :class:`Dispatch`) of a scenario or trace
    (docs/scheduling.md); None when none is given (version 2 exactly). A bad value is a
    :class:`ScenarioError` naming the field."""
    if not any(k in d for k in ("share", "quantum_s", "dispatch")):
        return None
    share = as_str(d.get("share", Share.CHARTS.value), "share")
    if share not in tuple(Share):
        raise ScenarioError("share", f"unknown share {show(share)} (expected one of {', '.join(Share)})")
    dispatch = as_str(d.get("dispatch", Dispatch.STRICT.value), "dispatch")
    if dispatch not in tuple(Dispatch):
        raise ScenarioError("dispatch", f"unknown dispatch {show(dispatch)} "
                                        f"(expected one of {', '.join(Dispatch)})")
    quantum = as_num(d.get("quantum_s", DEFAULT_QUANTUM_S), "quantum_s", 0)
    if not quantum > 0 or not math.isfinite(quantum):
        raise ScenarioError("quantum_s", f"must be > 0, got {show(d.get('quantum_s'))}")
    return {"share": Share(share), "quantum_s": float(quantum), "dispatch": Dispatch(dispatch)}


def _parse_common(d: Mapping) -> tuple[int, dict, dict, Durations]:
    budget = as_int(need(d, "budget", ""), "budget", 0)
    default_avg = as_num(d.get("default_avg_s", DEFAULT_AVG_S), "default_avg_s", 0)
    weights: dict[str, int] = {}
    for i, o in enumerate(as_list(need(d, "orgs", ""), "orgs")):
        p = f"orgs[{i}]"
        o = as_obj(o, p)
        oid = as_str(need(o, "id", p), f"{p}.id")
        if oid in weights:
            raise ScenarioError(f"{p}.id", f"duplicate org {show(oid)}")
        weights[oid] = as_int(need(o, "weight", p), f"{p}.weight", 0)
    # version 3's costs may draw on pools: scheduling.contract.pool_scenario reads them (plan and simulate)
    costs = {} if pooled.is_pooled(d) else _pair_table(d, "costs", "cost", "cost", weights, lambda v, f: as_int(v, f, 1))
    averages = _pair_table(d, "averages", "avg_s", "average", weights, lambda v, f: as_num(v, f, 0),
                           any_org=True)
    counts = {}  # the finished charts behind each average, where given (a declared duration's blend)
    for i, item in enumerate(d.get("averages", [])):
        if item.get("count") is not None:
            counts[(item["org"], item["workflow"])] = as_int(item["count"], f"averages[{i}].count", 0)
    expected: dict[str, float] = {}
    for i, item in enumerate(as_list(d.get("expected", []), "expected")):
        p = f"expected[{i}]"
        item = as_obj(item, p)
        wf = as_str(need(item, "workflow", p), f"{p}.workflow")
        if wf in expected:
            raise ScenarioError(f"{p}.workflow", f"duplicate workflow {show(wf)}")
        expected[wf] = as_num(need(item, "expected_s", p), f"{p}.expected_s", 0)
    return budget, weights, costs, Durations(averages, default_avg, expected, counts)


def _pair_table(d: dict, key: str, field: str, noun: str, weights: dict, parse,
                any_org: bool = False) -> dict:
    """``costs`` / ``averages``: a list of {org, workflow, <field>} as {(org, workflow): value}.
    ``any_org``: ``org`` may be null (an average over all orgs, scenario contract v2), but
    not together with a null ``workflow``."""
    table: dict = {}
    for i, item in enumerate(as_list(d.get(key, []), key)):
        p = f"{key}[{i}]"
        item = as_obj(item, p)
        org = need(item, "org", p)
        org = None if org is None and any_org else known_org(org, f"{p}.org", weights)
        wf = as_str(need(item, "workflow", p), f"{p}.workflow", nullable=True)
        if org is None and wf is None:
            raise ScenarioError(p, "org and workflow are both null (an average needs at least one)")
        if (org, wf) in table:
            raise ScenarioError(p, f"duplicate {noun} of ({show(org)}, {show(wf)})")
        table[(org, wf)] = parse(need(item, field, p), f"{p}.{field}")
    return table


def parse_scenario(d: Any) -> Scenario:
    """Validate a scenario dict and convert it to core values."""
    s, cols = parse_columns(d)
    return Scenario(s.now, s.budget, s.weights, s.costs, s.durations, s.running, charts(cols), s.policies)


def charts(cols: Columns) -> list[QueuedChart]:
    """The :class:`QueuedChart` of each chart of ``cols`` (its index its ``seq``)."""
    queued = list(map(QueuedChart, cols.ids, cols.orgs, cols.workflows, cols.created, range(len(cols.ids))))
    for i, c in cols.special.items():
        queued[i] = c
    return queued


def parse_columns(d: Any, *, unique_ids: bool = True) -> tuple[Scenario, Columns]:
    """:func:`parse_scenario` with its queued charts as :class:`~scheduling.plan.Columns`
    (the scenario's ``queued`` left empty): what :func:`plan` reads, no object per chart.
    ``unique_ids=False``: plainly valid queued charts are not checked for a repeated id
    (:func:`plan` checks its output instead: one set of a million ids less)."""
    d = as_obj(d, "scenario")
    now = parse_ts(need(d, "now", ""), "now")
    budget, weights, costs, durations = _parse_common(d)
    ids: set[str] = set()

    def new_id(v: Any, path: str) -> str:
        v = as_str(v, path)
        if v in ids:
            raise ScenarioError(path, f"duplicate id {show(v)}")
        ids.add(v)
        return v

    running = []
    for i, r in enumerate(as_list(d.get("running", []), "running")):
        p = f"running[{i}]"
        r = as_obj(r, p)
        cid = new_id(need(r, "id", p), f"{p}.id")
        org = known_org(need(r, "org", p), f"{p}.org", weights)
        wf = as_str(need(r, "workflow", p), f"{p}.workflow", nullable=True)
        started = parse_ts(need(r, "started_at", p), f"{p}.started_at")
        cost = r.get("cost")
        cost = costs.get((org, wf), 1) if cost is None else as_int(cost, f"{p}.cost", 1)
        running.append(RunningChart(cid, org, wf, started, cost))
    queued = as_list(d.get("queued", []), "queued")
    cols = _plain_columns(queued, weights, ids, unique_ids)
    if cols is None:  # every chart checked field by field: the first error, named
        cols = columns([parse_queued_chart(c, i, new_id, weights) for i, c in enumerate(queued)])
    return Scenario(now, budget, weights, costs, durations, running, [], parse_policies(d)), cols


_QUEUED_REQUIRED = tuple(map(itemgetter, ("id", "org", "workflow", "created_at")))
_tzinfo = attrgetter("tzinfo")
_fromiso, _timestamp = datetime.fromisoformat, datetime.timestamp


def _plain_columns(queued: list, weights: Mapping[str, int], running_ids: set,
                   unique_ids: bool = True) -> Columns | None:
    """The queued charts as columns when they are plainly valid, a column at a time (the
    loops in C); None as soon as anything is not (then every chart goes through
    :func:`parse_queued_chart`, which names the first wrong field). Plainly valid: each chart a
    dict with a unique string id, a known org, a string or null workflow and a
    created_at with an offset; a chart with more fields is checked whole by
    :func:`parse_queued_chart` (and is special if it has a flag or time set)."""
    n = len(queued)
    if n == 0:
        return Columns([], [], [], [], {})
    try:
        if set(map(type, queued)) != {dict}:
            return None
        ids, orgs, wfs, created = (list(map(get, queued)) for get in _QUEUED_REQUIRED)
        if set(map(type, ids)) != {str} or not set(map(type, wfs)) <= _WF_TYPES:
            return None
        if unique_ids:
            id_set = set(ids)
            if len(id_set) != n or not id_set.isdisjoint(running_ids):
                return None
        if not set(orgs).issubset(weights):
            return None
        dts = list(map(_fromiso, created))
    except (KeyError, TypeError, ValueError):
        return None
    if None in map(_tzinfo, dts):
        return None
    special = {}
    lens = list(map(len, queued))
    if lens.count(4) != n:
        for i in _other_than(lens, 4):
            c = queued[i]
            if (c.get("priority", False) is False and c.get("paused", False) is False
                    and c.get("prioritized_at") is None and c.get("front_at") is None and c.get("round") is None):
                continue
            try:
                special[i] = parse_queued_chart(c, i, as_str, weights)
            except ScenarioError:
                return None
    return Columns(ids, orgs, wfs, list(map(_timestamp, dts)), special)


_WF_TYPES = {str, type(None)}


def _other_than(values: list, common, dense: int = 16) -> Iterable[int]:
    """The indices of ``values`` whose value is not ``common``, in order: found by
    ``list.index`` a distinct value at a time (a scan in C) when they are few, else by
    one pass."""
    others = set(values)
    others.discard(common)
    if len(values) - values.count(common) > len(values) // dense:
        return compress(range(len(values)), map(common.__ne__, values))
    found = []
    for v in others:
        i = -1
        try:
            while True:
                i = values.index(v, i + 1)
                found.append(i)
        except ValueError:
            pass
    return sorted(found)


def parse_queued_chart(c: Any, i: int, new_id, weights: Mapping[str, int]) -> QueuedChart:
    """``queued[i]``, every field checked (the slow path: errors name the field);
    ``new_id(value, path)`` reads the id (and refuses a duplicate). What
    :func:`parse_scenario` gives each chart its fast path does not take."""
    p = f"queued[{i}]"
    c = as_obj(c, p)
    cid = new_id(need(c, "id", p), f"{p}.id")
    org = known_org(need(c, "org", p), f"{p}.org", weights)
    wf = as_str(need(c, "workflow", p), f"{p}.workflow", nullable=True)
    created = parse_ts(need(c, "created_at", p), f"{p}.created_at")
    prio = as_bool(c.get("priority", False), f"{p}.priority")
    pat = parse_ts(c.get("prioritized_at"), f"{p}.prioritized_at", nullable=True)
    paused = as_bool(c.get("paused", False), f"{p}.paused")
    front = parse_ts(c.get("front_at"), f"{p}.front_at", nullable=True)
    rnd = c.get("round")
    rnd = None if rnd is None else as_int(rnd, f"{p}.round", 0)
    return QueuedChart(cid, org, wf, created, i, prio, pat, paused, front, rnd)


# --------------------------------------------------------------------- plan
def plan_to_json(p: Plan, weights: Iterable[str] = (), *, copy: bool = True) -> dict:
    """A core :class:`Plan` as the contract's JSON object. ``copy=False``: the plan's own
    lists go into it as they are (a caller that hands the plan over; a million ids are
    not walked once more)."""
    own = list if copy else (lambda x: x if type(x) is list else list(x))
    org_clear = {o: 0.0 for o in weights}
    org_clear.update(p.org_clear_s)
    parts = p.etas.parts() if isinstance(p.etas, ById) else None
    if parts is None:
        etas = {cid: {"start_s": start, "finish_s": finish} for cid, (start, finish) in p.etas.items()}
    else:  # the plan's columns, without an Eta per chart
        head, ids, (starts, fins) = parts
        etas = {cid: {"start_s": start, "finish_s": finish} for cid, (start, finish) in head.items()}
        etas.update(zip(ids, [{"start_s": start, "finish_s": finish} for start, finish in zip(starts, fins)]))
    return {
        "order": own(p.order),
        "dispatch": own(p.dispatch),
        "held": own(p.held),
        "paused": own(p.paused),
        "blocked": own(p.blocked),
        "etas": etas,
        "org_clear_s": org_clear,
        "org_unplanned": dict(p.org_unplanned),
        "clear_s": p.clear_s,
    }


def plan_scenario(s: Scenario) -> Plan:
    """The core plan of a parsed scenario. With policies (``share``, ``quantum_s``,
    ``dispatch``), the live order's plan of the same backlog under them (rounds given by
    the arrival rule from ``head = 0``; a dump's saved rounds are not read)."""
    if s.policies is not None:
        q = FairQueue.from_backlog([c if c.round is None else _no_round(c) for c in s.queued], budget=s.budget,
                                   weights=s.weights, costs=s.costs, estimate=s.durations, **s.policies)
        return q.plan(s.running, s.now, s.durations)
    return core.plan(s.queued, s.running, budget=s.budget, weights=s.weights,
                     costs=s.costs, estimate=s.durations, now=s.now)


def _no_round(c: QueuedChart) -> QueuedChart:
    return QueuedChart(c.id, c.org, c.workflow, c.created_at, c.seq, c.priority, c.prioritized_at, c.paused,
                       c.front_at)


def plan(scenario: dict) -> dict:
    """The plan of a scenario dict, as a dict (docs/scheduling.md).

    The cyclic garbage collector is paused for the call: it allocates a few acyclic
    objects per chart, and each collection would rescan the whole scenario again
    (at 1M charts that made the plan 27x the 100k time, not ~12x); what it returns then
    leaves the young generation at once (``gc_paused(age_out=True)``). Without policies the
    charts go from the dict to the plan as columns (no object per chart)."""
    if pooled.is_pooled(scenario):
        return _plan_pooled(scenario)
    with gc_paused(age_out=True):
        try:
            s, cols = parse_columns(scenario, unique_ids=False)  # ids: checked on the plan below
        except ScenarioError:
            parse_columns(scenario)  # the first error in order, a repeated id's included
            raise
        if s.policies is None:
            p = core.plan(cols, s.running, budget=s.budget, weights=s.weights, costs=s.costs,
                          estimate=s.durations, now=s.now)
            out = plan_to_json(p, s.weights, copy=False)
            if _ids_unique(out, p, s.running):
                return out
        elif len(set(cols.ids).union(r.id for r in s.running)) == len(cols.ids) + len(s.running):
            p = plan_scenario(Scenario(s.now, s.budget, s.weights, s.costs, s.durations, s.running,
                                       charts(cols), s.policies))
            return plan_to_json(p, s.weights, copy=False)
        parse_columns(scenario)  # raises the repeated id's error
        raise AssertionError("a repeated id the checked parse did not refuse")


def _plan_pooled(scenario: dict) -> dict:
    """The plan of a scenario of version 3 (pools, costs drawing on them, limits):
    :func:`scheduling.contract.pool_scenario.plan`, every field checked first."""
    s, cols = parse_columns(scenario)
    pools = pooled.parse_pools(scenario, s.weights, s.budget)
    run_demand = pooled.running_demands(scenario, s.running, pools)
    with gc_paused(age_out=True):
        return pooled.plan(cols, charts(cols), s.running, run_demand, pools, weights=s.weights,
                           estimate=s.durations, now=s.now, policies=s.policies)


def _ids_unique(out: dict, p: Plan, running: Sequence[RunningChart]) -> bool:
    """No id repeated among the running and queued charts of ``out``, the JSON of the plan
    ``p``: every chart with an ETA is a key of ``out["etas"]`` (one each: a repeated id
    would make fewer), and the charts without one are checked against them."""
    etas, parts = out["etas"], p.etas.parts() if isinstance(p.etas, ById) else None
    others = out["held"] + out["paused"] + out["blocked"]
    if parts is None or len(parts[1]) != len(out["order"]):  # a chart in the order without an ETA
        every = [r.id for r in running] + out["order"] + others
        return len(set(every)) == len(every)
    return (len(etas) == len(parts[0]) + len(parts[1]) and len(set(others)) == len(others)
            and etas.keys().isdisjoint(others))


def dump_scenario(
    queue: FairQueue,
    *,
    running: Sequence[RunningChart],
    now: float,
    durations: Durations,
) -> dict:
    """The live state as a scenario: every ordered normal-tier chart carries
    its current ``round``, so a plan of the dump equals ``queue.plan(...)``."""
    out_q = []
    for c in queue.backlog():
        item = {"id": c.id, "org": c.org, "workflow": c.workflow,
                "created_at": to_iso(c.created_at), "priority": c.priority,
                "prioritized_at": None if c.prioritized_at is None else to_iso(c.prioritized_at),
                "paused": c.paused}
        if c.front_at is not None:
            item["front_at"] = to_iso(c.front_at)
        if c.round is not None:
            item["round"] = c.round
        out_q.append(item)
    return {
        "now": to_iso(now),
        "budget": queue.budget,
        "default_avg_s": durations.default_avg_s,
        "orgs": [{"id": o, "weight": w} for o, w in queue.weights.items()],
        "costs": [{"org": o, "workflow": wf, "cost": c} for (o, wf), c in queue.costs.items()],
        "averages": [_average(o, wf, a, durations.counts.get((o, wf)))
                     for (o, wf), a in durations.averages.items()],
        "expected": [{"workflow": wf, "expected_s": x} for wf, x in durations.expected.items()],
        "running": [{"id": r.id, "org": r.org, "workflow": r.workflow,
                     "started_at": to_iso(r.started_at), "cost": r.cost} for r in running],
        "queued": out_q,
    }


def _average(org: str | None, workflow: str | None, avg_s: float, count: int | None) -> dict:
    item = {"org": org, "workflow": workflow, "avg_s": avg_s}
    if count is not None:
        item["count"] = count
    return item


# ----------------------------------------------------------------- simulate
@dataclass(frozen=True, slots=True)
class Trace:
    budget: int
    weights: dict[str, int]
    costs: dict[tuple[str, str | None], int]
    durations: Durations
    arrivals: list[Arrival]
    events: list[Event]
    eta_model: EtaModel = EtaModel.LANES
    policies: dict | None = None


def parse_trace(d: Any) -> Trace:
    """Validate a trace dict and convert it to core values."""
    d = as_obj(d, "trace")
    budget, weights, costs, durations = _parse_common(d)
    eta_model = as_str(d.get("eta_model", EtaModel.LANES.value), "eta_model")
    if eta_model not in ETA_MODELS:
        raise ScenarioError("eta_model", f"unknown ETA model {show(eta_model)} "
                                         f"(expected one of {', '.join(ETA_MODELS)})")
    eta_model = EtaModel(eta_model)
    ids: set[str] = set()
    arrivals = []
    for i, a in enumerate(as_list(need(d, "arrivals", ""), "arrivals")):
        p = f"arrivals[{i}]"
        a = as_obj(a, p)
        cid = as_str(need(a, "id", p), f"{p}.id")
        if cid in ids:
            raise ScenarioError(f"{p}.id", f"duplicate id {show(cid)}")
        ids.add(cid)
        org = known_org(need(a, "org", p), f"{p}.org", weights)
        wf = as_str(need(a, "workflow", p), f"{p}.workflow", nullable=True)
        at = as_num(need(a, "at_s", p), f"{p}.at_s", 0)
        actual = as_num(need(a, "actual_s", p), f"{p}.actual_s", 0)
        prio = as_bool(a.get("priority", False), f"{p}.priority")
        arrivals.append(Arrival(cid, org, wf, at, actual, prio))
    events = []
    for i, e in enumerate(as_list(d.get("events", []), "events")):
        p = f"events[{i}]"
        e = as_obj(e, p)
        at = as_num(need(e, "at_s", p), f"{p}.at_s", 0)
        kinds = [k for k in ("set_weight", "set_budget", "set_pool", "pause", "resume") if k in e]
        if len(kinds) != 1:
            raise ScenarioError(p, "expected exactly one of set_weight, set_budget, set_pool, pause, "
                                   f"resume, got {show(sorted(k for k in e if k != 'at_s'))}")
        kind = kinds[0]
        v = e[kind]
        if kind == "set_weight":
            sw = as_obj(v, f"{p}.set_weight")
            org = known_org(need(sw, "org", f"{p}.set_weight"), f"{p}.set_weight.org", weights)
            w = as_int(need(sw, "weight", f"{p}.set_weight"), f"{p}.set_weight.weight", 0)
            events.append(Event(at, kind, org=org, value=w))
        elif kind == "set_budget":
            events.append(Event(at, kind, value=as_int(v, f"{p}.set_budget", 0)))
        elif kind == "set_pool":  # version 3: {"pool": "llm", "capacity": 4} (pool checked by simulate)
            sp = as_obj(v, f"{p}.set_pool")
            pool = as_str(need(sp, "pool", f"{p}.set_pool"), f"{p}.set_pool.pool")
            events.append(Event(at, kind, org=pool, value=as_int(need(sp, "capacity", f"{p}.set_pool"),
                                                                  f"{p}.set_pool.capacity", 0)))
        else:
            events.append(Event(at, kind, chart=as_str(v, f"{p}.{kind}")))
    return Trace(budget, weights, costs, durations, arrivals, events, eta_model, parse_policies(d))


def sim_to_json(r: SimResult) -> dict:
    """The contract's result; the forecast model adds each chart's ``eta_p90_at_arrival_s``
    (a finish it should beat 9 times out of 10)."""
    charts = [{"id": c.id, "org": c.org, "arrive_s": c.arrive_s, "start_s": c.start_s,
               "finish_s": c.finish_s, "eta_at_arrival_s": c.eta_at_arrival_s} for c in r.charts]
    if r.eta_model is EtaModel.FORECAST:
        for out, c in zip(charts, r.charts):
            out["eta_p90_at_arrival_s"] = c.eta_p90_at_arrival_s
    return {"policy": r.policy.value, "eta_model": r.eta_model.value, "charts": charts, "summary": r.summary}


def _with_policies(out: dict, policies: dict | None) -> dict:
    if policies is not None:
        out["share"], out["quantum_s"], out["dispatch"] = (policies["share"].value, policies["quantum_s"],
                                                           policies["dispatch"].value)
    return out


def simulate(trace: dict, policy: Policy | str = Policy.WRR) -> dict:
    """Replay a trace under ``policy`` (wrr, fifo, proportional); the result dict
    of docs/scheduling.md plus a ``summary`` of per-org fairness figures and the
    ``eta_model`` the trace chose (``"lanes"``, default, or ``"forecast"``)."""
    if policy not in POLICIES:
        raise ScenarioError("policy", f"unknown policy {show(policy)} "
                                      f"(expected one of {', '.join(POLICIES)})")
    t = parse_trace(trace)
    if pooled.is_pooled(trace):
        return _simulate_pooled(trace, t, policy)
    r = core_simulate(t.arrivals, t.events, budget=t.budget, weights=t.weights,
                      costs=t.costs, estimate=t.durations, policy=policy, eta_model=t.eta_model,
                      **(t.policies or {}))
    return _with_policies(sim_to_json(r), t.policies)


def _simulate_pooled(trace: dict, t: Trace, policy: Policy | str) -> dict:
    """A trace of version 3 (docs/scheduling.md, "Pools"): the fair order under the pools,
    each chart's ``pools`` (what it draws on) and each pool's peak in use in the summary."""
    if Policy(policy) is not Policy.WRR:
        raise ScenarioError("policy", f"only wrr is defined with pools, got {show(str(Policy(policy).value))}")
    pools = pooled.parse_pools(trace, t.weights, t.budget)
    pol = t.policies or {}
    backfill = pol.get("dispatch", Dispatch.STRICT) is Dispatch.BACKFILL
    if t.eta_model is not EtaModel.LANES and (backfill or pools.has_limits):
        raise ScenarioError("eta_model", "only lanes is defined with pools under backfill or with limits yet")
    for i, ev in enumerate(t.events):
        if ev.kind == "set_pool" and (ev.org not in pools.capacity or ev.org == "default"):
            raise ScenarioError(f"events[{i}].set_pool.pool", f"unknown pool {show(ev.org)}")
    r = simulate_pools(t.arrivals, t.events, pools=pools, weights=t.weights, estimate=t.durations,
                       eta_model=t.eta_model, **{k: v for k, v in pol.items() if k in ("share", "quantum_s", "dispatch")})
    out = sim_to_json(r)
    for c, a in zip(out["charts"], t.arrivals):
        c["pools"] = dict(pools.demand(a.org, a.workflow))
    return _with_policies(out, t.policies)
