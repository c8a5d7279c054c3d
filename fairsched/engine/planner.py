"""The capacity planner: the smallest budget (at most :data:`MAX_BUDGET`) that clears the
backlog by a time, or keeps every due time, by search over the same ETA model
(docs/scheduling.md, "The capacity planner").

Pure and synchronous, on a :class:`LiveState` that is the caller's to spoil (a forked child
of the scheduler, or ``manage.py plan --live``'s own read of the database).

**The range.** A budget under the largest cost of a queued chart leaves that chart blocked,
and a blocked chart never clears: the search starts at that cost (``lo``). From there on no
chart changes class with the budget, so the order is the same for every budget: the state
is re-ranked once (as a budget change re-ranks it, :func:`.whatif.rerank_all`) and each
probe is one ETA pass at another budget. Held and paused charts never run under any budget:
they are left out of both questions and counted (``set_aside``).

**The search** (:func:`search`) finds the boundary between the budgets that do not meet the
goal and those that do, and stops when it holds two neighbours: ``b`` meets it and ``b - 1``
does not (or ``b`` is ``lo``), so its answer is *verified* by its own probes. Each probe also
says which budget its figures point to (``need``): the clear-time scales about as the work
over the budget, ``need = b x clear / (T - now)``, and a chart's start too,
``need = b x max(start / (due - now - duration))`` over the charts with a due time. The
first guess costs no pass (the ordered work over the time available; for the due times,
each chart's work ahead of it over its room), the next ones are the secant through the
last probes on ``need - b``, kept inside the bracket; after :data:`GUIDED` guesses it
gallops (the budget doubled) or bisects. A few passes where the plain search from ``lo``
took 12 to 16 at 100k queued (docs/operating.md).

*Monotone for the lane model.* With the order fixed, the lane walk is list scheduling:
with more lanes, the sorted lane-free times are element-wise no later at every step (the
c-th earliest lane of a larger multiset is no later; replacing the c earliest by a finish
no later keeps the domination), so every chart's ETA is non-increasing in the budget; so
are the clear-time and every "ETA after the due time": the boundary is unique and the
search finds the smallest budget, whatever its guesses. *The forecast model* lets expected
arrivals in while it walks, at the times the walk reaches; more budget walks faster, so
fewer phantoms come first, which only helps; but the rounds the phantoms take depend on
where the walk is, so this is not proven: the answer meets the goal and one budget less
does not, and ``tests/engine/test_planner.py`` compares it with brute force.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.validation import MAX_BUDGET
from scheduling.plan import gc_paused
from scheduling.pools import DEFAULT_POOL, Pools
from fairsched.engine import whatif
from fairsched.engine.state import LiveState
from fairsched.engine.live_types import PassInput

GUIDED = 4  # probes placed by the guesses; then the search gallops or bisects


@dataclass(frozen=True)
class PlanAnswer:
    goal: str                 # "clear_by" or "meet_due"
    budget: int | None        # the smallest budget that does it; None: no budget up to MAX_BUDGET would
    current: int              # the budget now
    probes: int               # ETA passes run
    clear_s: float | None     # the clear-time at that budget (seconds from now)
    late: int                 # charts with a due time whose ETA is after it, at that budget (or at MAX_BUDGET)
    set_aside: int            # held and paused charts: no budget runs them
    why: str                  # in words
    pool: str | None = None   # the pool whose capacity ``budget`` is (None: the budget itself)

    def to_json(self, now: float) -> dict[str, Any]:
        out = {"goal": self.goal, "budget": self.budget, "current": self.current, "probes": self.probes,
               "clear_after": whatif._iso(now, self.clear_s), "late": self.late, "set_aside": self.set_aside,
               "message": self.why}
        if self.pool is not None:
            out["pool"] = self.pool
        return out


def _due_times(captured: PassInput, now: float) -> list[tuple[str, float]]:
    """(chart id, due time in seconds from ``now``) of each chart with a due time, queued in
    the order or running: the same at every budget above ``lo`` (the order does not change)."""
    due = captured.due
    if due is None or not (due.explicit or due.turnaround):
        return []
    explicit, turnaround = due.explicit, due.turnaround
    out = []
    for keys in captured.queue._order.sublists():
        for k in keys:
            at = explicit.get(int(k[4])) if explicit else None
            if at is None:
                t = turnaround.get(k[6][0])
                if t is None:
                    continue
                at = k[5].created_at + t
            out.append((k[4], at - now))
    for r in captured.running:
        at = explicit.get(r.id)
        if at is None:
            t = turnaround.get(str(r.org))
            if t is None:
                continue
            at = r.created_at + t
        out.append((str(r.id), at - now))
    return out


def late_charts(captured: PassInput, etas: dict, now: float) -> int:
    """How many charts with a due time (queued in the order, or running) have their ETA after
    it: what ``meet_due`` asks to be none (a plan checked by hand, the tests' brute force)."""
    return _lateness(_due_times(captured, now), etas)[0]


def _lateness(due: list[tuple[str, float]], etas: dict) -> tuple[int, float]:
    """How many of ``due`` have their ETA after their due time, and the largest start over
    the room each has to start in (due time minus duration): above 1, some chart is late;
    infinite, one is late even starting now."""
    late, worst = 0, 0.0
    get = etas.get
    for cid, due_s in due:
        eta = get(cid)
        if eta is None:
            continue
        start, fin = eta[0], eta[1]
        if fin > due_s:
            late += 1
        room = due_s - (fin - start)
        r = start / room if room > 0 else (math.inf if fin > due_s else 0.0)
        if r > worst:
            worst = r
    return late, worst


def _estimates(captured: PassInput) -> Callable[[str, str | None], float]:
    """The durations the configured model walks the lanes with."""
    if captured.forecast_pass:
        return captured.forecast.mean
    return captured.durations


def _first_guess(captured: PassInput, now: float, clear_by: float | None, due: list[tuple[str, float]]) -> float:
    """A budget to probe first, from no pass: the work (cost x duration) over the time it
    has. Clear by T: all the ordered and running work over ``T - now``. Every due time: for
    each chart with one, the work ahead of it in the order over the time it has to start."""
    q = captured.queue
    est = _estimates(captured)
    info: dict = {}

    def work(pair) -> float:
        w = info.get(pair)
        if w is None:
            w = info[pair] = q.cost_of(pair[0], pair[1]) * float(est(pair[0], pair[1]))
        return w
    running = sum(r.cost * max(0.0, float(est(str(r.org), r.workflow)) - (now - r.started_at))
                  for r in captured.running)
    if clear_by is not None:
        counts = Counter(k[6] for keys in q._order.sublists() for k in keys)
        total = running + sum(n * work(pair) for pair, n in counts.items())
        left = clear_by - now
        return total / left if left > 0 else math.inf
    due_s_of = dict(due)
    ahead, worst = running, 0.0
    for keys in q._order.sublists():
        for k in keys:
            w = work(k[6])
            due_s = due_s_of.get(k[4])
            if due_s is not None:
                room = due_s - w / q.cost_of(*k[6])
                if room > 0 and ahead / room > worst:
                    worst = ahead / room
            ahead += w
    return worst


def search(probe: Callable[[int], tuple[bool, float]], lo: int, bound: int, first: float) -> int | None:
    """The smallest budget in ``[lo, bound]`` that meets the goal, where the goal's truth is
    monotone in the budget; None if ``bound`` does not. ``probe(b)``: (does ``b`` meet it,
    the budget ``b``'s figures point to); ``first``: the budget to probe first."""
    a, b = lo - 1, None  # the largest known not to do (or below the range), the smallest known to do
    sides: dict[bool, tuple[int, float]] = {}  # the latest probe on each side: (budget, need - budget)
    last: list[tuple[int, float, bool]] = []   # the last two probes: (budget, need - budget, did it do)
    guess = first
    for step in range(bound + 1):
        top = bound if b is None else b - 1
        g = a + 1 if not guess >= a + 1 else top if not guess <= top else math.ceil(guess - 1e-9)
        ok, need = probe(g)
        sides[ok] = (g, need - g)
        last = [*last[-1:], (g, need - g, ok)]
        if ok:
            b = g
        else:
            a = g
        if b is not None and b - a <= 1:
            return b
        if b is None and a >= bound:
            return None
        guided = step + 1 < GUIDED
        if b is None:  # all short of the goal so far: the guesses, then gallop
            guess = (_secant(last[0][:2], last[1][:2]) if len(last) == 2 else need) if guided else 2 * a
        elif guided and not _creeping(last, sides[True]):
            guess = _secant(sides[False], sides[True]) if False in sides else (
                _secant(last[0][:2], last[1][:2]) if len(last) == 2 else need)
        else:
            guess = (a + b) // 2  # bisect
    return b  # (not reached: every step narrows the range)


def _creeping(last: list[tuple[int, float, bool]], done: tuple[int, float]) -> bool:
    """The guesses stopped narrowing the range fast: the last two probes fell on the same
    side, or the smallest budget known to do meets the goal exactly (on a plateau: the
    clear-time moves in steps of a chart's duration, and a probe on one says nothing of
    where it starts). The search then bisects."""
    return (len(last) == 2 and last[0][2] == last[1][2]) or done[1] >= 0


def _secant(p: tuple[int, float], q: tuple[int, float]) -> float:
    """Where the line through (budget, need - budget) at ``p`` and ``q`` crosses 0 (a point
    with an infinite need: the other point's need)."""
    (x1, f1), (x2, f2) = p, q
    if not (math.isfinite(f1) and math.isfinite(f2)):
        return math.inf if math.isinf(f1) and math.isinf(f2) else (x2 + f2 if math.isfinite(f2) else x1 + f1)
    if f1 == f2:
        return x2 + f2
    return x2 - f2 * (x2 - x1) / (f2 - f1)


def plan_budget(state: LiveState, now: float, *, clear_by: float | None = None, meet_due: bool = False,
                bound: int = MAX_BUDGET, hint: tuple[int, float] | None = None, pool: str | None = None) -> PlanAnswer:
    """The smallest budget that clears the ordered backlog by ``clear_by`` (absolute time), or
    (``meet_due``) leaves no chart's ETA after its due time. Spoils ``state``. Without the
    cyclic collector: the re-rank and each pass allocate several objects per chart.
    ``hint``: (a budget, the clear-time an ETA pass found at it, absolute): the scheduler's
    last pass, a first guess for ``clear_by`` that already holds what the model adds to the
    work (the forecast's expected arrivals); only a guess, whatever changed since.

    ``pool``: with capacity pools, the smallest capacity of that pool (the others as they
    are; ``default`` is the budget) that does it, e.g. "how many units of llm clear
    everything by 17:00?". With several pools the ETAs need not fall as one pool grows
    (another pool may hold the head back, and list scheduling over several resources has
    its anomalies): the answer is verified by its own probes (it meets the goal, one unit
    less does not), and is not proven the smallest."""
    if (clear_by is None) == (not meet_due):
        raise ValueError("give clear_by or meet_due, one of them")
    pools = state.queue.pools
    if pool is not None and (pools is None or pool not in pools.capacity):
        raise ValueError(f"pool: unknown pool {pool!r}")
    with gc_paused():
        return _plan(state, now, clear_by, meet_due, bound, hint if pool is None else None, pool)


def _set_capacity(q, pool: str | None, b: int) -> None:
    """Probe capacity ``b`` of ``pool`` (None or ``default``: the budget) on the spoiled
    queue, without a re-rank: above the search's ``lo`` no chart changes class."""
    if pool is None or pool == DEFAULT_POOL:
        q._budget = b
    p = q.pools
    if p is not None:
        q._pools = Pools({**p.capacity, **({} if pool is None else {pool: b}), DEFAULT_POOL: q._budget},
                         p.demands, p.limits)


def _lowest(state: LiveState, pool: str | None) -> int:
    """The least capacity under which no chart that could run is blocked: the largest cost of
    one (the budget), or the most units of ``pool`` one draws on."""
    q = state.queue
    if pool is None:
        return max([1, *(q.cost_of(*pair) for pair in _unheld_pairs(state))])
    p = q.pools
    return max([1, *(dict(p.demand(*pair)).get(pool, 0) for pair in _unheld_pairs(state))])


def _plan(state: LiveState, now: float, clear_by: float | None, meet_due: bool, bound: int,
          hint: tuple[int, float] | None, pool: str | None = None) -> PlanAnswer:
    goal = "clear_by" if clear_by is not None else "meet_due"
    q = state.queue
    what = "budget" if pool is None else f"capacity of pool {pool}"
    current = q.budget if pool is None else q.pools.capacity[pool]
    set_aside = len(q.held) + len(q.paused)
    lo = _lowest(state, pool)
    if lo > bound:
        return PlanAnswer(goal, None, current, 0, None, 0, set_aside,
                          f"no {what} up to {bound:,} runs every chart: one draws {lo:,}", pool)
    _set_capacity(q, pool, lo)
    whatif.rerank_all(q)  # as a budget change re-ranks; no chart changes class above lo
    captured = state.capture()
    due = _due_times(captured, now) if meet_due else []
    memo: dict[int, tuple[bool, float, int, float]] = {}

    def probe(b: int) -> tuple[bool, float]:
        """An ETA pass at budget ``b``: does it meet the goal, and the budget it points to."""
        if b not in memo:
            _set_capacity(q, pool, b)
            report = state.capture().eta_report(now)
            late, worst = _lateness(due, report.etas) if meet_due else (0, 0.0)
            if clear_by is not None:
                left = clear_by - now
                ok = report.clear_s <= left
                need = b * report.clear_s / left if left > 0 else (0.0 if ok else math.inf)
            else:
                ok, need = late == 0, b * worst
            memo[b] = (ok, report.clear_s, late, need)
        return memo[b][0], memo[b][3]

    if hint is not None and clear_by is not None and hint[0] > 0 and hint[1] > now and clear_by > now:
        first = hint[0] * (hint[1] - now) / (clear_by - now)  # the step a probe at hint[0] would point to
    else:
        first = _first_guess(captured, now, clear_by, due)
    b = search(probe, lo, bound, first)
    if b is None:
        _, clear_s, late, _ = memo[bound]
        why = (f"no {what} up to {bound:,} clears the backlog by then (at {bound:,}: "
               f"{clear_s:.0f} s from now)" if clear_by is not None
               else f"no {what} up to {bound:,} keeps every due time ({late} late even at {bound:,})")
        return PlanAnswer(goal, None, current, len(memo), clear_s, late, set_aside, why, pool)
    _, clear_s, late, _ = memo[b]
    why = (f"{what} {b:,} clears the backlog by then" if clear_by is not None
           else f"{what} {b:,} keeps every due time")
    why += f" (now {current:,})"
    if set_aside:
        why += f"; {set_aside:,} held or paused charts left out (no capacity runs them)"
    return PlanAnswer(goal, b, current, len(memo), clear_s, late, set_aside, why, pool)


def _unheld_pairs(state: LiveState) -> set[tuple[str, str | None]]:
    """The (org, workflow) of the queued charts a budget can run: in the order, or blocked
    (not held, not paused)."""
    q = state.queue
    pairs = {k[6] for keys in q._order.sublists() for k in keys}
    for cid in q.blocked:
        c = q.get(cid)
        if c is not None:
            pairs.add((c.org, c.workflow))
    return pairs
