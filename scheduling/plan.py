"""The static plan of one moment (docs/scheduling.md, "One moment: the plan"):
classify, order, the head-of-line dispatch and the lane simulation, over a whole
backlog at once. The rules themselves (classify, the head-of-line stop, the lane
walk, auto-hold) are the functions of :mod:`scheduling.rules`, which the live
order (:mod:`scheduling.queue`) calls too; this module adds the bulk
bookkeeping around them (the lanes at ``now``, clear-times, the ETA columns)."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import chain, compress, count, repeat
from operator import attrgetter, call, floordiv, itemgetter
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from .keys import org_rank_key, priority_key
from .lanes import Durations, initial_lanes, lane_count, lane_pass, running_clear
from .rules import BLOCKED, HELD, ORDERED, PAUSED, classify, head_of_line
from .types import ById, Eta, EtaReport, LazyMapping, Plan, QueuedChart, RunningChart

T = TypeVar("T")


@contextmanager
def gc_paused(age_out: bool = False):
    """Pause the cyclic garbage collector around a bulk pass that allocates one
    small acyclic object per chart (ETAs): otherwise gen-2 collections rescan
    the whole live backlog again and again. Restores the previous state.

    ``age_out``: then move every tracked object into the oldest generation, without a
    collection (``gc.freeze`` then ``gc.unfreeze``: list splices, which also zero the
    young generation's count). The pass's own containers (an order of a million ids, an
    ETA dict as large) were born young, and the first young collection after the pause
    would walk every item of them to free nothing: 127 ms at 1M charts
    (``bench/scenario.py``). A full collection still sees them. Skipped if something froze
    objects on purpose (the live scheduler freezes its backlog): ``unfreeze`` would hand
    those back to the collector."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if age_out and was and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if was:
            gc.enable()

_created = attrgetter("created_at")
_seq = attrgetter("seq")
_org = attrgetter("org")
_id = attrgetter("id")
_workflow = attrgetter("workflow")


def plan_dispatch(order: Iterable[T], free: int, cost_of: Callable[[T], int]) -> list[T]:
    """The head of ``order`` that starts within ``free`` (:func:`.rules.head_of_line`)."""
    order = list(order)
    return order[:head_of_line(map(cost_of, order), free)]


_make_eta = partial(tuple.__new__, Eta)


def walked(ids: Sequence[str], orgs: Sequence[str], starts: list, fins: list, org_clear: dict,
           pairs: Sequence | None = None, pair_org: Mapping | None = None) -> tuple[Sequence, list, list]:
    """The walk's charts that got an ETA, as ``(ids, starts, fins)``, and their
    clear-times added to ``org_clear`` (org -> latest finish). With ``pairs``
    (a key of each chart's (org, workflow), whose estimate is one number) the
    clear-times need no per-chart loop: starts are non-decreasing along the
    order, so a pair's latest finish is that of its last chart in the order.
    A key is the (org, workflow) tuple itself, or anything ``pair_org`` maps
    to the org; ``orgs`` (each chart's org) is only read without ``pairs``."""
    org_of = pair_org.__getitem__ if pair_org is not None else itemgetter(0)
    if None in fins:
        keep = [i for i, f in enumerate(fins) if f is not None]
        ids = [ids[i] for i in keep]
        orgs = [orgs[i] for i in keep] if orgs else [org_of(pairs[i]) for i in keep]
        starts = [starts[i] for i in keep]
        fins = [fins[i] for i in keep]
        pairs = None
    get = org_clear.get
    if pairs is not None:
        last = dict(zip(pairs, range(len(pairs))))  # last write wins: last index per pair
        for pair, i in last.items():
            fin = fins[i]
            org = org_of(pair)
            if fin > get(org, -1.0):
                org_clear[org] = fin
    else:
        for org, fin in zip(orgs, fins):
            if fin > get(org, -1.0):
                org_clear[org] = fin
    return ids, starts, fins


def collect_etas(ids: Sequence[str], orgs: Sequence[str], starts: list, fins: list,
                 etas: dict, org_clear: dict, pairs: Sequence | None = None) -> None:
    """:func:`walked`, its ETAs added to the dict ``etas`` (id -> Eta)."""
    ids, starts, fins = walked(ids, orgs, starts, fins, org_clear, pairs)
    etas.update(zip(ids, map(_make_eta, zip(starts, fins))))


def eta_map(head: dict, ids: Sequence[str], starts: list, fins: list) -> ById:
    """:func:`walked`'s columns as an id -> Eta mapping (indexed on first lookup)."""
    return ById(head, ids, lambda i: _make_eta((starts[i], fins[i])), lambda: map(_make_eta, zip(starts, fins)),
                (starts, fins))


def unplanned_clear(rep: EtaReport, unplanned: Mapping[str, int], planned: "set[str]") -> EtaReport:
    """``rep`` with scenario contract v2's clear-times: an org in ``unplanned`` (org ->
    its held, paused and blocked charts) with no chart in ``planned`` (the orgs with
    a chart running or in the order) gets None, never 0: its work will not finish
    under the current settings, so calling it clear would be a lie."""
    org_clear = dict(rep.org_clear_s)
    for org in unplanned:
        if org not in planned:
            org_clear[org] = None
    return EtaReport(rep.etas, org_clear, rep.clear_s, dict(unplanned))


def simulate_lanes(
    items: Iterable[tuple[str, str, int, float]],
    lanes: list[float],
    etas: dict,
    org_clear: dict,
) -> None:
    """Walk ``items`` = (chart id, org, cost, estimate) in order through the
    lane heap (see :func:`lane_pass`), writing ``etas`` and ``org_clear``."""
    items = list(items)
    starts, fins = lane_pass([(c, e) for _, _, c, e in items], lanes)
    collect_etas([i[0] for i in items], [i[1] for i in items], starts, fins, etas, org_clear)


@dataclass(frozen=True, slots=True)
class Columns:
    """A backlog as columns, in arrival order (a chart's index is its arrival number):
    the ``ids``, ``orgs``, ``workflows`` and ``created`` (epoch seconds) of every chart,
    and ``special``, index -> the :class:`QueuedChart` of each chart that has any of
    ``priority``, ``prioritized_at``, ``paused``, ``front_at`` or ``round`` (a chart not
    there has none). What the plan reads: no object per chart, and a scenario's charts
    are parsed straight into it (:func:`columns` makes it from QueuedCharts)."""

    ids: list[str]
    orgs: list[str]
    workflows: list[str | None]
    created: list[float]
    special: Mapping[int, QueuedChart]


def _is_special(c: QueuedChart) -> bool:
    return (c.priority or c.paused or c.prioritized_at is not None or c.front_at is not None
            or c.round is not None)


def columns(queued: Iterable[QueuedChart]) -> Columns:
    """``queued`` as :class:`Columns`, in ``seq`` order (a stable sort: equal seqs keep
    their order, so the index breaks every tie as ``seq`` did)."""
    queued = list(queued)
    seqs = list(map(_seq, queued))
    if seqs != sorted(seqs):
        queued.sort(key=_seq)
    special = {i: c for i, c in enumerate(queued) if _is_special(c)}
    return Columns(list(map(_id, queued)), list(map(_org, queued)), list(map(_workflow, queued)),
                   list(map(_created, queued)), special)


def plan(
    queued: Sequence[QueuedChart] | Columns,
    running: Sequence[RunningChart] = (),
    *,
    budget: int,
    weights: Mapping[str, int],
    costs: Mapping[tuple[str, str | None], int] | None = None,
    estimate: Callable[[str, str | None], float] = Durations(),
    now: float = 0.0,
) -> Plan:
    """The static plan of one moment, exactly as ``docs/scheduling.md``.

    ``queued`` in arrival order (``seq`` breaks ties anyway), or already as
    :class:`Columns`. ``weights`` must name every org of the charts; ``costs`` maps
    (org, workflow) to a cost, 1 if absent. If every normal-tier chart carries a
    ``round`` (a live dump), those rounds are used; otherwise rounds are computed
    (rank // weight, the rank taking ``front_at`` into account, see :mod:`scheduling`).
    """
    with gc_paused():
        cols = queued if isinstance(queued, Columns) else columns(queued)
        return _plan(cols, running, budget=budget, weights=weights, costs=costs or {},
                     estimate=estimate, now=now)


_PRIO = "priority"  # what step 1 calls an ordered chart of the priority tier


def _gather(idx: Sequence[int]) -> Callable[[Sequence], list]:
    """``take(seq) == [seq[i] for i in idx]``, the loop in C (one itemgetter of them all)."""
    if len(idx) < 2:
        return lambda seq: [seq[i] for i in idx]
    get = itemgetter(*idx)
    return lambda seq: list(get(seq))


def _plan(cols: Columns, running: Sequence[RunningChart], *, budget: int, weights: Mapping[str, int],
          costs: Mapping, estimate: Callable, now: float) -> Plan:
    """:func:`plan` with the garbage collector paused (see there)."""
    ids, orgs = cols.ids, cols.orgs
    # 1. classify; 2. order
    groups, cost_est_of, chart_cost_est = _classified(orgs, cols.workflows, cols.special, weights, costs,
                                                      budget, estimate)
    prio = groups.get(_PRIO, [])
    created, special = cols.created, cols.special
    prio.sort(key=lambda i: priority_key(created[i], i, special[i].prioritized_at))
    # One (cost, estimate) tuple per pair (no tuple built per chart): the tuple stands for
    # its pair in the clear-time bookkeeping, or its identity if two pairs' tuples are equal.
    order_ids, cost_est, rounds = _normal_tier(groups.get(ORDERED, []), cols, weights, chart_cost_est)
    if prio:  # ahead of the normal tier (a slice insert moves the tier's items, touching none)
        take = _gather(prio)
        order_ids[:0] = take(ids)
        cost_est[:0] = take(chart_cost_est)
    pair_org = {ce: org for (org, _), ce in cost_est_of.items()}
    keys = cost_est
    if len(pair_org) < len(cost_est_of):
        pair_org = {id(ce): org for (org, _), ce in cost_est_of.items()}
        keys = list(map(id, cost_est))
    # 3. dispatch: the head-of-line stop within the free budget
    free = budget - sum(r.cost for r in running)
    dispatch = order_ids[:head_of_line(map(itemgetter(0), cost_est), free)]
    # 4. ETAs: the lane walk
    etas, org_clear, walked_ids, starts, fins = _lane_etas(order_ids, cost_est, keys, pair_org, running,
                                                           budget=budget, estimate=estimate, now=now)
    clear = max(org_clear.values(), default=0.0)
    if clear < 0.0:
        clear = 0.0
    held, paused, blocked = (groups.get(k, []) for k in (HELD, PAUSED, BLOCKED))
    unplanned: dict[str, int] = {}
    for i in chain(held, paused, blocked):
        unplanned[orgs[i]] = unplanned.get(orgs[i], 0) + 1
    for org in weights:
        if org not in org_clear:
            org_clear[org] = None if org in unplanned else 0.0
    return Plan(
        order=order_ids,
        dispatch=dispatch,
        held=[ids[i] for i in held],
        paused=[ids[i] for i in paused],
        blocked=[ids[i] for i in blocked],
        etas=eta_map(etas, walked_ids, starts, fins),
        org_clear_s=org_clear,
        clear_s=clear,
        rounds=rounds,
        org_unplanned=unplanned,
    )


class _PairInfo(dict):
    """(org, workflow) -> its (cost, estimate) tuple, made on the first lookup of the pair
    (then also ``state[pair]``, what :func:`.rules.classify` makes of its charts that have
    no flag): one pass over the charts finds the pairs and looks their tuples up."""

    __slots__ = ("costs", "weights", "budget", "estimate", "state")

    def __init__(self, costs: Mapping, weights: Mapping[str, int], budget: int, estimate: Callable) -> None:
        super().__init__()
        self.costs, self.weights, self.budget, self.estimate = costs, weights, budget, estimate
        self.state: dict = {}

    def __missing__(self, pair: tuple) -> tuple[int, float]:
        org, wf = pair
        cost = self.costs.get(pair, 1)
        ce = self[pair] = (cost, float(self.estimate(org, wf)))
        self.state[pair] = classify(self.weights[org], False, cost, self.budget)
        return ce


def _classified(orgs: list, workflows: list, special: Mapping[int, QueuedChart], weights: Mapping[str, int],
                costs: Mapping, budget: int, estimate: Callable) -> tuple[dict, dict, list]:
    """Step 1: :func:`.rules.classify` each chart, once per distinct (org, workflow) and
    once per special chart. Returns the charts' indices by class (``ORDERED``: the normal
    tier, ``_PRIO``: the priority tier, ``HELD``, ``PAUSED``, ``BLOCKED``; a class with
    no chart may be missing), each in arrival order, each pair's (cost, estimate) and
    each chart's (its pair's tuple)."""
    info = _PairInfo(costs, weights, budget, estimate)
    chart_cost_est = list(map(info.__getitem__, zip(orgs, workflows)))
    state = info.state
    n = len(orgs)
    kind_of = {}
    for i in sorted(special):
        c = special[i]
        st = classify(weights[c.org], c.paused, chart_cost_est[i][0], budget)
        kind_of[i] = _PRIO if st == ORDERED and c.priority else st
    if all(st == ORDERED for st in state.values()):  # only the special charts are anything else
        groups: dict = {}
        keep = bytearray(b"\x01") * n if special else None  # 0: a special chart outside the normal tier
        for i, kind in kind_of.items():
            if kind != ORDERED:
                groups.setdefault(kind, []).append(i)
                keep[i] = 0
        groups[ORDERED] = list(compress(range(n), keep)) if groups else list(range(n))
        return groups, info, chart_cost_est
    kinds = list(map(state.__getitem__, zip(orgs, workflows)))
    for i, kind in kind_of.items():
        kinds[i] = kind
    return {k: list(compress(range(n), map(k.__eq__, kinds))) for k in set(kinds)}, info, chart_cost_est


def _normal_tier(normal: list[int], cols: Columns, weights: Mapping[str, int],
                 chart_cost_est: list) -> tuple[list[str], list, Mapping]:
    """Step 2, the normal tier (``normal``: its charts' indices in arrival order): its ids
    and (cost, estimate) tuples sorted by :func:`.keys.normal_key` (round, created_at,
    arrival), and each chart's round. Sorted once by (created_at, arrival) (a stable sort
    on created_at of the arrival order), the columns taken in that order; then each
    chart's round, and one stable sort by round. The rounds are those the charts carry
    when every one does (a live dump), else computed (:func:`_computed_rounds`)."""
    normal.sort(key=cols.created.__getitem__)
    by_created = _gather(normal)
    ids = by_created(cols.ids)
    special = cols.special
    if normal and len(special) >= len(normal) and all(
            i in special and special[i].round is not None for i in normal):
        rnds = [special[i].round for i in normal]
        rounds = LazyMapping(lambda: dict(zip(ids, rnds)))
    else:
        rnds = _computed_rounds(normal, by_created(cols.orgs), cols, weights)
        rounds = LazyMapping(lambda: ById({}, ids, rnds.__getitem__, lambda: iter(rnds)))
    # stable: each round keeps (created_at, arrival)
    return _sorted_by(ids, rnds), _sorted_by(by_created(chart_cost_est), rnds), rounds


def _keys_in_list_order() -> bool:
    """Does ``sorted`` ask for the keys of the items in their order? (CPython does, one
    pass before it sorts.)"""
    return sorted("ab", key=partial(next, iter((1, 0)))) == ["b", "a"]


def _sorted_by(items: list, keys: list) -> list:
    """``items`` stably sorted by ``keys`` (aligned with them). The sort carries the items
    itself: no list of indices to sort and gather from afterwards, which at a million
    charts reads every item and index again in a random order (twice the time)."""
    if _KEYS_IN_ORDER:
        return sorted(items, key=partial(next, iter(keys)))
    return _gather(sorted(range(len(items)), key=keys.__getitem__))(items)


_KEYS_IN_ORDER = _keys_in_list_order()


def _computed_rounds(normal: list[int], orgs: list[str], cols: Columns, weights: Mapping[str, int]) -> list[int]:
    """The rounds of a static backlog (``normal`` sorted by (created_at, arrival), ``orgs``
    their orgs): the chart at rank r in its org (:func:`.keys.org_rank_key`, moved-to-front
    charts first) is in round ``r // weight``."""
    special = cols.special
    fronts = {i for i, c in special.items() if c.front_at is not None}
    if fronts:
        fronts.intersection_update(normal)
    if not fronts:  # each org's ranks count up along the tier: one counter per org, in C
        few = len(weights) * 8 < len(orgs)  # else only the orgs that have a chart here
        nxt = {o: map(floordiv, count(), repeat(weights[o])).__next__
               for o in (weights if few else set(orgs)) if weights[o]}
        return list(map(call, map(nxt.__getitem__, orgs)))
    created = cols.created
    rank: dict[str, int] = {}
    front_rounds: dict[int, int] = {}
    for i in sorted(fronts, key=lambda i: org_rank_key(created[i], i, special[i].front_at)):
        org = cols.orgs[i]
        r = rank.get(org, 0)
        rank[org] = r + 1
        front_rounds[i] = r // weights[org]
    rnds: list[int] = []
    for i, org in zip(normal, orgs):
        if i in front_rounds:
            rnds.append(front_rounds[i])
        else:
            r = rank.get(org, 0)
            rank[org] = r + 1
            rnds.append(r // weights[org])
    return rnds


def _lane_etas(order_ids: list[str], cost_est: list[tuple[int, float]], keys: list, pair_org: dict,
               running: Sequence[RunningChart], *, budget: int, estimate: Callable, now: float):
    """Step 4: the lanes at ``now``, then :func:`.lanes.lane_pass` over the order.
    Returns the running charts' ETAs, each org's clear-time so far, and the walked
    charts' ``(ids, starts, fins)``; ``keys`` (each chart's pair, as ``pair_org`` knows
    it) are :func:`walked`'s ``pairs``."""
    etas: dict[str, Eta] = {}
    running_cost = sum(r.cost for r in running)
    cap = lane_count(budget, running_cost, len(cost_est), lambda: sum(map(itemgetter(0), cost_est)))
    lanes = initial_lanes(running, now, budget, estimate, etas, cap)
    org_clear: dict[str, float] = {}
    running_clear(running, etas, org_clear, floor=-1.0)
    starts, fins = lane_pass(cost_est, lanes)
    walked_ids, starts, fins = walked(order_ids, (), starts, fins, org_clear, keys, pair_org)
    return etas, org_clear, walked_ids, starts, fins
