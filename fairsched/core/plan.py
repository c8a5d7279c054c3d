"""The static plan of one moment (docs/scheduling.md, "One moment: the plan"):
classify, order, the head-of-line dispatch walk and the lane simulation, over a
whole backlog at once. The live order (fairsched/core/queue.py) keeps its own
incremental structures for the same rules."""
from __future__ import annotations

from collections import Counter
from itertools import chain
from heapq import heappop, heappush, heapreplace
import gc
from contextlib import contextmanager
from functools import partial
from operator import attrgetter, itemgetter
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from .keys import org_rank_key, priority_key
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


def plan_dispatch(order: Iterable[T], free: int, cost_of: Callable[[T], int]) -> list[T]:
    """Head-of-line walk: start each chart of ``order`` whose cost fits in
    ``free`` (which may be negative); stop at the first that does not fit."""
    started = []
    for item in order:
        c = cost_of(item)
        if c > free:
            break
        free -= c
        started.append(item)
    return started


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


def lane_pass(cost_est: Sequence[tuple[int, float]], lanes: list[float]
              ) -> tuple[list[float | None], list[float | None]]:
    """The lane simulation's walk, in O(n log budget): for each (cost c,
    estimate) in order, the chart starts when the c-th earliest lane frees
    (``lanes[c-1]`` of the sorted lanes), finishes ``estimate`` later and
    holds those c lanes until then. ``lanes`` is a heap (a sorted list is
    one) and is consumed. Returns parallel lists of starts and finishes; a
    chart whose cost exceeds the lanes gets None (it is blocked, never in an
    order). With a heap: pop c-1 lanes, the c-th is ``lanes[0]``; replace it
    by the finish and push c-1 more copies."""
    starts: list = []
    fins: list = []
    sa = starts.append
    fa = fins.append
    nl = len(lanes)
    hreplace, hpop, hpush = heapreplace, heappop, heappush
    for c, est in cost_est:
        if c == 1 and nl:
            start = lanes[0]
            fin = start + est
            hreplace(lanes, fin)
        elif c == 2 and nl >= 2:
            hpop(lanes)
            start = lanes[0]
            fin = start + est
            hreplace(lanes, fin)
            hpush(lanes, fin)
        elif 2 < c <= nl:
            for _ in range(c - 1):
                hpop(lanes)
            start = lanes[0]
            fin = start + est
            hreplace(lanes, fin)
            for _ in range(c - 1):
                hpush(lanes, fin)
        else:
            start = fin = None
        sa(start)
        fa(fin)
    return starts, fins


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
    costs = costs or {}
    held: list[QueuedChart] = []
    paused: list[QueuedChart] = []
    blocked: list[QueuedChart] = []
    prio: list[QueuedChart] = []
    normal: list[QueuedChart] = []
    cost_cache: dict = {}
    for c in queued:
        org = c.org
        if weights[org] == 0:
            held.append(c)
        elif c.paused:
            paused.append(c)
        else:
            pair = (org, c.workflow)
            cost = cost_cache.get(pair)
            if cost is None:
                cost = cost_cache[pair] = costs.get(pair, 1)
            if cost > budget:
                blocked.append(c)
            elif c.priority:
                prio.append(c)
            else:
                normal.append(c)

    # Priority tier, FIFO.
    prio.sort(key=lambda c: priority_key(c.created_at, c.seq, c.prioritized_at))

    # Normal tier: (round, created_at, arrival). Sort once by (created_at,
    # arrival) (a stable sort on created_at of a seq-ordered list), then the
    # round is a counting pass and the tier a bucket pass: O(n) after one sort.
    seqs = [c.seq for c in normal]
    if seqs != sorted(seqs):
        normal.sort(key=_seq)
    normal.sort(key=_created)
    rounds: dict[str, int] = {}
    if normal and all(c.round is not None for c in normal):
        for c in normal:
            rounds[c.id] = c.round
        normal.sort(key=lambda c: c.round)  # stable: keeps (created_at, arrival)
        tier = normal
    else:
        rank: dict[str, int] = {}
        fronts = [c for c in normal if c.front_at is not None]
        if fronts:
            fronts.sort(key=lambda c: org_rank_key(c.created_at, c.seq, c.front_at))
            for c in fronts:
                r = rank.get(c.org, 0)
                rank[c.org] = r + 1
                rounds[c.id] = r // weights[c.org]
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
                rnd = rounds[c.id]
            keep(rnd)
            buckets[rnd].append(c)
        rounds = ById({}, list(map(_id, normal)), rnds.__getitem__, lambda: iter(rnds))
        tier = [c for b in buckets for c in b]
    order = prio + tier
    order_ids = [c.id for c in order]

    # Dispatch: head-of-line within the free budget.
    free = budget - sum(r.cost for r in running)
    dispatch = plan_dispatch(order, free, lambda c: cost_cache[(c.org, c.workflow)])

    # ETAs: the lane simulation.
    etas: dict[str, Eta] = {}
    cap = lane_count(budget, sum(r.cost for r in running), len(order),
                     lambda: sum(cost_cache[(c.org, c.workflow)] for c in order))
    lanes = initial_lanes(running, now, budget, estimate, etas, cap)
    org_clear: dict[str, float] = {}
    running_clear(running, etas, org_clear, floor=-1.0)
    # One (cost, estimate) tuple per pair, reached org -> workflow (no tuple built per
    # chart); the tuple's identity stands for its pair in the clear-time bookkeeping.
    info: dict = {}
    pair_org: dict = {}
    for (org, wf), cost in cost_cache.items():
        ce = info.setdefault(org, {})[wf] = (cost, float(estimate(org, wf)))
        pair_org[id(ce)] = org
    cost_est = [info[c.org][c.workflow] for c in order]
    starts, fins = lane_pass(cost_est, lanes)
    walked_ids, starts, fins = walked(order_ids, (), starts, fins, org_clear, list(map(id, cost_est)), pair_org)
    clear = max(org_clear.values(), default=0.0)
    if clear < 0.0:
        clear = 0.0
    unplanned: dict[str, int] = {}
    for c in chain(held, paused, blocked):
        unplanned[c.org] = unplanned.get(c.org, 0) + 1
    for org in weights:
        if org not in org_clear:
            org_clear[org] = None if org in unplanned else 0.0

    by_seq = lambda cs: [c.id for c in sorted(cs, key=_seq)]
    return Plan(
        order=order_ids,
        dispatch=[c.id for c in dispatch],
        held=by_seq(held),
        paused=by_seq(paused),
        blocked=by_seq(blocked),
        etas=eta_map(etas, walked_ids, starts, fins),
        org_clear_s=org_clear,
        clear_s=clear,
        rounds=rounds,
        org_unplanned=unplanned,
    )
