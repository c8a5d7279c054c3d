"""The static plan of one moment (contracts/scenario.md, "Plan"), and the two
pure building blocks the live scheduler shares with it: the head-of-line
dispatch walk and the ETA lane simulation."""
from __future__ import annotations

from heapq import heappop, heappush, heapreplace
from operator import attrgetter
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from .keys import org_rank_key, priority_key
from .types import Durations, Eta, EtaReport, Plan, QueuedChart, RunningChart

T = TypeVar("T")

_created = attrgetter("created_at")
_seq = attrgetter("seq")


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


def initial_lanes(
    running: Iterable[RunningChart], now: float, budget: int, estimate: Callable, etas: dict
) -> list[float]:
    """The budget lanes at ``now``: each running chart fills ``cost`` lanes with
    its remaining time (``max(0, started_at + estimate - now)``, also written to
    ``etas``). Sorted; the ``budget`` largest kept if there are more (a budget
    lowered under running work), else padded with zeros. A sorted list is a heap."""
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
    return [0.0] * (budget - len(lanes)) + lanes


def simulate_lanes(
    items: Iterable[tuple[str, str, int, float]],
    lanes: list[float],
    etas: dict,
    org_clear: dict,
) -> None:
    """Walk ``items`` = (chart id, org, cost, estimate) in order through the
    lane heap, in O(n log budget). A chart of cost c starts when the c-th
    earliest lane frees (``lanes[c-1]`` of the sorted lanes), finishes
    ``estimate`` later, and holds those c lanes until then. A chart whose cost
    exceeds the lanes gets no ETA (it is blocked and never in an order)."""
    nl = len(lanes)
    for cid, org, c, est in items:
        if c == 1 and nl:
            start = lanes[0]
            fin = start + est
            heapreplace(lanes, fin)
        elif 1 < c <= nl:
            for _ in range(c):
                start = heappop(lanes)
            fin = start + est
            for _ in range(c):
                heappush(lanes, fin)
        else:
            continue
        etas[cid] = Eta(start, fin)
        if fin > org_clear.get(org, -1.0):
            org_clear[org] = fin


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
    """The static plan of one moment, exactly as ``contracts/scenario.md``.

    ``queued`` in arrival order (``seq`` breaks ties anyway). ``weights`` must
    name every org of the charts; ``costs`` maps (org, workflow) to a cost, 1
    if absent. If every normal-tier chart carries a ``round`` (a live dump),
    those rounds are used; otherwise rounds are computed (rank // weight, the
    rank taking ``front_at`` into account, see :mod:`fairsched.core`).
    """
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
    if any(normal[i].seq > normal[i + 1].seq for i in range(len(normal) - 1)):
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
        buckets: list[list[QueuedChart]] = []
        for c in normal:
            cid = c.id
            if c.front_at is None:
                org = c.org
                r = rank.get(org, 0)
                rank[org] = r + 1
                rnd = r // weights[org]
                rounds[cid] = rnd
            else:
                rnd = rounds[cid]
            while rnd >= len(buckets):
                buckets.append([])
            buckets[rnd].append(c)
        tier = [c for b in buckets for c in b]
    order = prio + tier

    # Dispatch: head-of-line within the free budget.
    free = budget - sum(r.cost for r in running)
    dispatch = plan_dispatch(order, free, lambda c: cost_cache[(c.org, c.workflow)])

    # ETAs: the lane simulation.
    etas: dict[str, Eta] = {}
    lanes = initial_lanes(running, now, budget, estimate, etas)
    org_clear: dict[str, float] = {}
    for r in running:
        f = etas[r.id][1]
        if f > org_clear.get(r.org, -1.0):
            org_clear[r.org] = f
    est_cache: dict = {}

    def items():
        for c in order:
            pair = (c.org, c.workflow)
            est = est_cache.get(pair)
            if est is None:
                est = est_cache[pair] = float(estimate(c.org, c.workflow))
            yield c.id, c.org, cost_cache[pair], est

    simulate_lanes(items(), lanes, etas, org_clear)
    for org in weights:
        org_clear.setdefault(org, 0.0)
    clear = max(org_clear.values(), default=0.0)
    if clear < 0.0:
        clear = 0.0

    by_seq = lambda cs: [c.id for c in sorted(cs, key=_seq)]
    return Plan(
        order=[c.id for c in order],
        dispatch=[c.id for c in dispatch],
        held=by_seq(held),
        paused=by_seq(paused),
        blocked=by_seq(blocked),
        etas=etas,
        org_clear_s=org_clear,
        clear_s=clear,
        rounds=rounds,
    )
