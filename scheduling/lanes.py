"""A chart's ETA, from the order (docs/scheduling.md, "4. ETAs: the lane simulation"):
the duration estimate (:class:`Durations`), the lanes at ``now`` (:func:`initial_lanes`,
capped by :func:`lane_count`; the running charts' finishes, :func:`running_clear`) and
the lane walk (:func:`lane_pass`).

Every ETA pass calls these: the static plan (:mod:`scheduling.plan`), the live order's
passes (:mod:`scheduling.queue.etas`, which keeps a pass's lanes and ETAs between
dispatches), the simulator and the forecast pass (:mod:`scheduling.forecast`, which feeds
the walk a generator that lets the expected arrivals in).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from heapq import heappop, heappush, heapreplace
from typing import Callable, Iterable, Mapping, NamedTuple

from .types import Eta, RunningChart

DEFAULT_AVG_S = 600.0  # seconds: the estimate when nothing is known (scenario ``default_avg_s``)
DECLARED_AS_N = 5
"""A workflow's declared expected duration weighs as this many finished charts against
the history it is blended with (:class:`Durations`)."""
SOURCES = ("pair", "workflow", "org", "declared", "default")
"""Where an estimate comes from (:meth:`Durations.source`), in the order they are tried
(a declared duration comes before the org's average)."""


class EstimateSource(NamedTuple):
    """Where :class:`Durations` took an estimate from: ``kind`` one of :data:`SOURCES`,
    ``seconds`` the estimate, ``n`` the finished charts behind the history used (None
    if unknown or none) and ``declared_s`` the workflow's declared duration when it is
    blended in or used alone (else None)."""

    kind: str
    seconds: float
    n: int | None = None
    declared_s: float | None = None


@dataclass(frozen=True, slots=True)
class Durations:
    """Duration estimates (scenario contract v2), the first that exists of:

    1. the average of (org, workflow), key ``(org, workflow)``;
    2. the workflow's average over all orgs, key ``(None, workflow)``: a workflow
       type says more about a run's length than the org does, so a new tenant's
       first audit is not estimated from its reviews;
    3. the workflow's declared expected duration, ``expected[workflow]`` (an admin's
       figure, for a workflow with no history yet);
    4. the org's average over all its workflows, key ``(org, None)``;
    5. ``default_avg_s``.

    A declared duration is also blended into the history of 1 or 2 as
    :data:`DECLARED_AS_N` finished charts: ``(5 x declared + n x average) / (5 + n)``
    with ``n = counts[key]``, the finished charts behind that average; it fades out
    as they come (n = 20: a fifth of the weight). An average without a count is taken
    as it is. Callable as ``durations(org, workflow) -> seconds``;
    :meth:`source` says where that came from."""

    averages: Mapping[tuple[str | None, str | None], float] = field(default_factory=dict)
    default_avg_s: float = DEFAULT_AVG_S
    expected: Mapping[str, float] = field(default_factory=dict)
    counts: Mapping[tuple[str | None, str | None], int] = field(default_factory=dict)

    def __call__(self, org: str, workflow: str | None) -> float:
        a = self.averages
        key = (org, workflow)
        v = a.get(key)
        if v is None and workflow is not None:
            key = (None, workflow)
            v = a.get(key)
        if self.expected and workflow is not None:
            d = self.expected.get(workflow)
            if d is not None:
                if v is None:
                    return d
                n = self.counts.get(key)
                return v if n is None else (DECLARED_AS_N * d + n * v) / (DECLARED_AS_N + n)
        if v is None:
            v = a.get((org, None))
            if v is None:
                return self.default_avg_s
        return v

    def source(self, org: str, workflow: str | None) -> EstimateSource:
        """The estimate of (org, workflow) and where it came from (see the class); its
        ``seconds`` are what the call gives."""
        a = self.averages
        if workflow is not None:
            d = self.expected.get(workflow)
            for kind, key in (("pair", (org, workflow)), ("workflow", (None, workflow))):
                v = a.get(key)
                if v is not None:
                    n = self.counts.get(key)
                    if d is None or n is None:
                        return EstimateSource(kind, v, n)
                    return EstimateSource(kind, (DECLARED_AS_N * d + n * v) / (DECLARED_AS_N + n), n, d)
            if d is not None:
                return EstimateSource("declared", d, None, d)
        v = a.get((org, None))
        if v is not None:
            return EstimateSource("org", v, self.counts.get((org, None)))
        return EstimateSource("default", self.default_avg_s)


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


def lane_pass(cost_est: Iterable[tuple[int, float]], lanes: list[float], finishes: bool = True,
              ) -> tuple[list[float | None], list[float | None]]:
    """The lane walk, in O(n log budget): for each (cost c, estimate) in order, the
    chart starts when the c-th earliest lane frees (``lanes[c-1]`` of the sorted
    lanes), finishes ``estimate`` later and holds those c lanes until then.
    ``lanes`` is a heap (a sorted list is one) and is consumed. Returns parallel
    lists of starts and finishes; a chart whose cost exceeds the lanes gets None.

    ``cost_est`` may be a generator: it is read one item at a time, each after the
    previous one has taken its lanes, so a caller can look at ``lanes[0]`` (the
    earliest free lane) before it yields the next chart (the forecast pass does,
    to let expected arrivals in first) or stop early (a partial pass).

    ``finishes=False``: no list of finishes (empty), for a caller that adds durations of
    its own to the starts (the forecast pass): a float per chart less to hold.

    With a heap: the c-th earliest lane is read off the heap's top levels for c <= 3
    (the second is a child of the root, the third a child of the root or of the second),
    and the c earliest are replaced by the finish one at a time (with an estimate >= 0
    the finish is never earlier than the start, so each replace takes the next earliest); else,
    pop c-1 lanes, the c-th is ``lanes[0]``, replace it by the finish and push c-1 more
    copies. The lanes hold the same times either way (only their places in the heap
    differ)."""
    starts: list = []
    fins: list = []
    sa = starts.append
    fa = fins.append if finishes else bool  # (bool: a C call that keeps nothing)
    nl = len(lanes)
    hreplace, hpop, hpush = heapreplace, heappop, heappush
    for c, est in cost_est:
        if c == 1 and nl:
            start = lanes[0]
            fin = start + est
            hreplace(lanes, fin)
        elif c == 2 and nl >= 3 and est >= 0.0:
            a = lanes[1]
            b = lanes[2]
            start = a if a < b else b
            fin = start + est
            hreplace(lanes, fin)
            hreplace(lanes, fin)
        elif c == 3 and nl >= 7 and est >= 0.0:
            a = lanes[1]
            b = lanes[2]
            if a <= b:  # the second earliest is lanes[1]; the third: lanes[2] or its children
                start, x, y = b, lanes[3], lanes[4]
            else:
                start, x, y = a, lanes[5], lanes[6]
            if x < start:
                start = x
            if y < start:
                start = y
            fin = start + est
            hreplace(lanes, fin)
            hreplace(lanes, fin)
            hreplace(lanes, fin)
        elif 1 < c <= nl:
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
