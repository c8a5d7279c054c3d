"""The static plan of one moment (docs/scheduling.md, "One moment: the plan"):
classify, order, the head-of-line dispatch and the lane simulation, over a whole
backlog at once. The rules themselves (classify, the head-of-line stop, the lane
walk, auto-hold) are the functions of :mod:`fairsched.core.rules`, which the live
order (:mod:`fairsched.core.queue`) calls too; this module adds the bulk
bookkeeping around them (the lanes at ``now``, clear-times, the ETA columns)."""
from __future__ import annotations

from collections import Counter
from itertools import chain
import gc
from contextlib import contextmanager
from functools import partial
from operator import attrgetter, itemgetter
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from .keys import org_rank_key, priority_key
from .rules import BLOCKED, HELD, ORDERED, PAUSED, classify, head_of_line, lane_pass
from .types import ById, Durations, Eta, EtaReport, Plan, QueuedChart, RunningChart

T = TypeVar("T")


@contextmanager
def gc_paused():
    """Pause the cyclic garbage collector around a bulk pass that allocates one
    small acyclic object per chart (ETAs): otherwise gen-2 collections rescan
    the whole live backlog again and again. Restores the previous state."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

_created = attrgetter("created_at")
_seq = attrgetter("seq")
_org = attrgetter("org")
_id = attrgetter("id")
_round = attrgetter("round")


def plan_dispatch(order: Iterable[T], free: int, cost_of: Callable[[T], int]) -> list[T]:
    """The head of ``order`` that starts within ``free`` (:func:`.rules.head_of_line`)."""
    order = list(order)
    return order[:head_of_line(map(cost_of, order), free)]


def lane_count(budget: int, running_cost: int, n_ordered: int, ordered_cost: Callable[[], int]) -> int:
    """How many lanes the simulation needs: ``min(budget, running cost + ordered cost)``.

    A lane beyond the total cost that could ever run is never reached: with that
    many lanes every chart already starts at once (each takes its lanes from the
    untouched free ones, and there are always enough of those left), so more free
    lanes change no ETA. Capping keeps memory and time proportional to the charts,
    not to the budget (a budget of 10**9 with three charts builds a handful of
    lanes, not 10**9). Every cost is at least 1, so ``n_ordered`` charts cost at
    least ``n_ordered``: only a budget above ``running_cost + n_ordered`` needs the
    exact sum, which ``ordered_cost()`` computes (then over fewer charts than the
    budget)."""
    if budget <= running_cost + n_ordered:
        return budget
    return min(budget, running_cost + ordered_cost())


def running_clear(running: Iterable[RunningChart], etas: dict, org_clear: dict, floor: float = 0.0) -> None:
    """Raise each org's clear-time in ``org_clear`` to the finish of its running charts
    (``etas`` as :func:`initial_lanes` wrote them); an org not listed counts as ``floor``."""
    for r in running:
        f = etas[r.id][1]
        if f > org_clear.get(r.org, floor):
            org_clear[r.org] = f


def initial_lanes(
    running: Iterable[RunningChart], now: float, budget: int, estimate: Callable, etas: dict,
    cap: int | None = None,
) -> list[float]:
    """The budget lanes at ``now``: each running chart fills ``cost`` lanes with
    its remaining time (``max(0, started_at + estimate - now)``, also written to
    ``etas``). Sorted; the ``budget`` largest kept if there are more (a budget
    lowered under running work), else padded with zeros up to ``budget``, or only
    up to ``cap`` (see :func:`lane_count`: lanes no chart can reach are left out;
    the results are identical). A sorted list is a heap."""
    lanes: list[float] = []
    for r in running:
        rem = r.started_at + estimate(r.org, r.workflow) - now
        if rem < 0.0:
            rem = 0.0
        etas[r.id] = Eta(0.0, rem)
        lanes.extend([rem] * r.cost)
    lanes.sort()
    if budget <= 0:
        return []
    if len(lanes) > budget:
        return lanes[len(lanes) - budget:]
    n = budget if cap is None else min(budget, cap)
    return [0.0] * max(0, n - len(lanes)) + lanes


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
    return ById(head, ids, lambda i: _make_eta((starts[i], fins[i])), lambda: map(_make_eta, zip(starts, fins)))


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


def plan(
    queued: Sequence[QueuedChart],
    running: Sequence[RunningChart] = (),
    *,
    budget: int,
    weights: Mapping[str, int],
    costs: Mapping[tuple[str, str | None], int] | None = None,
    estimate: Callable[[str, str | None], float] = Durations(),
    now: float = 0.0,
) -> Plan:
    """The static plan of one moment, exactly as ``docs/scheduling.md``.

    ``queued`` in arrival order (``seq`` breaks ties anyway). ``weights`` must
    name every org of the charts; ``costs`` maps (org, workflow) to a cost, 1
    if absent. If every normal-tier chart carries a ``round`` (a live dump),
    those rounds are used; otherwise rounds are computed (rank // weight, the
    rank taking ``front_at`` into account, see :mod:`fairsched.core`).
    """
    with gc_paused():
        return _plan(queued, running, budget=budget, weights=weights, costs=costs,
                     estimate=estimate, now=now)


def _plan(
    queued: Sequence[QueuedChart],
    running: Sequence[RunningChart] = (),
    *,
    budget: int,
    weights: Mapping[str, int],
    costs: Mapping[tuple[str, str | None], int] | None = None,
    estimate: Callable[[str, str | None], float] = Durations(),
    now: float = 0.0,
) -> Plan:
    """:func:`plan` with the garbage collector running (see there)."""
    # 1. classify; 2. order
    held, paused, blocked, prio, normal, cost_cache = _classified(queued, weights, costs or {}, budget)
    prio.sort(key=lambda c: priority_key(c.created_at, c.seq, c.prioritized_at))
    tier, rounds = _normal_tier(normal, weights)
    order = prio + tier
    order_ids = [c.id for c in order]
    # One (cost, estimate) tuple per pair, reached org -> workflow (no tuple built per
    # chart); the tuple's identity stands for its pair in the clear-time bookkeeping.
    info: dict = {}
    pair_org: dict = {}
    for (org, wf), cost in cost_cache.items():
        ce = info.setdefault(org, {})[wf] = (cost, float(estimate(org, wf)))
        pair_org[id(ce)] = org
    cost_est = [info[c.org][c.workflow] for c in order]
    # 3. dispatch: the head-of-line stop within the free budget
    free = budget - sum(r.cost for r in running)
    dispatch = order_ids[:head_of_line(map(itemgetter(0), cost_est), free)]
    # 4. ETAs: the lane walk
    etas, org_clear, walked_ids, starts, fins = _lane_etas(order_ids, cost_est, pair_org, running,
                                                           budget=budget, estimate=estimate, now=now)
    clear = max(org_clear.values(), default=0.0)
    if clear < 0.0:
        clear = 0.0
    unplanned = _unplanned(held, paused, blocked)
    for org in weights:
        if org not in org_clear:
            org_clear[org] = None if org in unplanned else 0.0

    by_seq = lambda cs: [c.id for c in sorted(cs, key=_seq)]
    return Plan(
        order=order_ids,
        dispatch=dispatch,
        held=by_seq(held),
        paused=by_seq(paused),
        blocked=by_seq(blocked),
        etas=eta_map(etas, walked_ids, starts, fins),
        org_clear_s=org_clear,
        clear_s=clear,
        rounds=rounds,
        org_unplanned=unplanned,
    )


def _classified(queued: Iterable[QueuedChart], weights: Mapping[str, int], costs: Mapping, budget: int):
    """Step 1: :func:`.rules.classify` each chart, once per distinct (org, workflow,
    paused, priority). Returns the held, paused, blocked, priority-tier and
    normal-tier charts (each in ``queued``'s order) and the cost of each pair seen."""
    cost_cache: dict = {}
    held: list[QueuedChart] = []
    paused: list[QueuedChart] = []
    blocked: list[QueuedChart] = []
    prio: list[QueuedChart] = []
    normal: list[QueuedChart] = []
    into = {HELD: held.append, PAUSED: paused.append, BLOCKED: blocked.append}
    where: dict = {}  # (org, workflow, paused, priority) -> the list's append
    for c in queued:
        k = (c.org, c.workflow, c.paused, c.priority)
        put = where.get(k)
        if put is None:
            pair = (c.org, c.workflow)
            cost = cost_cache[pair] = costs.get(pair, 1)
            st = classify(weights[c.org], c.paused, cost, budget)
            put = where[k] = into[st] if st != ORDERED else (prio.append if c.priority else normal.append)
        put(c)
    return held, paused, blocked, prio, normal, cost_cache


def _normal_tier(normal: list[QueuedChart], weights: Mapping[str, int]) -> tuple[list[QueuedChart], Mapping]:
    """Step 2, the normal tier: sorted by :func:`.keys.normal_key` (round, created_at,
    arrival), and each chart's round. Sorted once by (created_at, arrival) (a stable
    sort on created_at of a seq-ordered list); then the rounds are a counting pass
    and the tier a bucket pass: O(n) after one sort. The rounds are those the charts
    carry when every one does (a live dump), else computed (:func:`_computed_rounds`)."""
    seqs = [c.seq for c in normal]
    if seqs != sorted(seqs):
        normal.sort(key=_seq)
    normal.sort(key=_created)
    if normal and all(c.round is not None for c in normal):
        rounds = {c.id: c.round for c in normal}
        normal.sort(key=_round)  # stable: keeps (created_at, arrival)
        return normal, rounds
    return _computed_rounds(normal, weights)


def _computed_rounds(normal: list[QueuedChart], weights: Mapping[str, int]) -> tuple[list[QueuedChart], ById]:
    """The rounds of a static backlog (``normal`` sorted by (created_at, arrival)):
    the chart at rank r in its org (:func:`.keys.org_rank_key`, moved-to-front
    charts first) is in round ``r // weight``. Returns the tier and the rounds."""
    rank: dict[str, int] = {}
    front_rounds: dict[str, int] = {}
    fronts = [c for c in normal if c.front_at is not None]
    if fronts:
        fronts.sort(key=lambda c: org_rank_key(c.created_at, c.seq, c.front_at))
        for c in fronts:
            r = rank.get(c.org, 0)
            rank[c.org] = r + 1
            front_rounds[c.id] = r // weights[c.org]
    counts = Counter(map(_org, normal))
    max_round = max(((n - 1) // weights[o] for o, n in counts.items()), default=-1)
    buckets: list[list[QueuedChart]] = [[] for _ in range(max_round + 1)]
    rnds: list[int] = []
    keep = rnds.append
    for c in normal:
        if c.front_at is None:
            org = c.org
            r = rank.get(org, 0)
            rank[org] = r + 1
            rnd = r // weights[org]
        else:
            rnd = front_rounds[c.id]
        keep(rnd)
        buckets[rnd].append(c)
    rounds = ById({}, list(map(_id, normal)), rnds.__getitem__, lambda: iter(rnds))
    return [c for b in buckets for c in b], rounds


def _lane_etas(order_ids: list[str], cost_est: list[tuple[int, float]], pair_org: dict,
               running: Sequence[RunningChart], *, budget: int, estimate: Callable, now: float):
    """Step 4: the lanes at ``now``, then :func:`.rules.lane_pass` over the order.
    Returns the running charts' ETAs, each org's clear-time so far, and the walked
    charts' ``(ids, starts, fins)``."""
    etas: dict[str, Eta] = {}
    running_cost = sum(r.cost for r in running)
    cap = lane_count(budget, running_cost, len(cost_est), lambda: sum(map(itemgetter(0), cost_est)))
    lanes = initial_lanes(running, now, budget, estimate, etas, cap)
    org_clear: dict[str, float] = {}
    running_clear(running, etas, org_clear, floor=-1.0)
    starts, fins = lane_pass(cost_est, lanes)
    walked_ids, starts, fins = walked(order_ids, (), starts, fins, org_clear, list(map(id, cost_est)), pair_org)
    return etas, org_clear, walked_ids, starts, fins


def _unplanned(*groups: list[QueuedChart]) -> dict[str, int]:
    """Per org, how many of its charts are in ``groups`` (held, paused, blocked)."""
    unplanned: dict[str, int] = {}
    for c in chain(*groups):
        unplanned[c.org] = unplanned.get(c.org, 0) + 1
    return unplanned
