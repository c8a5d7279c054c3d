"""The capacity planner: the smallest budget (at most :data:`MAX_BUDGET`) that clears the
backlog by a time, or keeps every due time, by search over the same ETA model
(docs/scheduling.md, "The capacity planner").

Pure and synchronous, on a :class:`LiveState` that is the caller's to spoil (a forked child
of the scheduler, or ``manage.py plan --live``'s own read of the database).

**The search.** A budget under the largest cost of a queued chart leaves that chart blocked,
and a blocked chart never clears: the search starts at that cost (``lo``). From there on no
chart changes class with the budget, so the order is the same for every budget: the state
is re-ranked once (as a budget change re-ranks it, :func:`.whatif.rerank_all`) and each
probe is one ETA pass at another budget. Held and paused charts never run under any budget:
they are left out of both questions and counted (``set_aside``).

*Monotone for the lane model.* With the order fixed, the lane walk is list scheduling:
with more lanes, the sorted lane-free times are element-wise no later at every step (the
c-th earliest lane of a larger multiset is no later; replacing the c earliest by a finish
no later keeps the domination), so every chart's ETA is non-increasing in the budget; so
are the clear-time and every "ETA after the due time": binary search finds the smallest.
*The forecast model* lets expected arrivals in while it walks, at the times the walk
reaches; more budget walks faster, so fewer phantoms come first, which only helps; but the
rounds the phantoms take depend on where the walk is, so this is not proven. The search is
the same binary search and its answer is *verified*: it meets the goal and one budget less
does not (``verified``); ``tests/engine/test_planner.py`` compares it with brute force.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.validation import MAX_BUDGET
from fairsched.core.plan import gc_paused
from fairsched.engine import whatif
from fairsched.engine.state import LiveState, PassInput


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

    def to_json(self, now: float) -> dict[str, Any]:
        return {"goal": self.goal, "budget": self.budget, "current": self.current, "probes": self.probes,
                "clear_after": whatif._iso(now, self.clear_s), "late": self.late, "set_aside": self.set_aside,
                "message": self.why}


def _late(captured: PassInput, etas: dict, now: float) -> int:
    """Charts with a due time (queued in the order, or running) whose ETA is after it."""
    due = captured.due
    if due is None or not (due.explicit or due.turnaround):
        return 0
    explicit, turnaround = due.explicit, due.turnaround
    n = 0
    for keys in captured.queue._order.sublists():
        for k in keys:
            i = int(k[4])
            at = explicit.get(i)
            if at is None:
                t = turnaround.get(k[6][0])
                if t is None:
                    continue
                at = k[5].created_at + t
            eta = etas.get(k[4])
            if eta is not None and eta[1] > at - now:
                n += 1
    for r in captured.running:
        at = explicit.get(r.id)
        if at is None:
            t = turnaround.get(str(r.org))
            if t is None:
                continue
            at = r.created_at + t
        eta = etas.get(str(r.id))
        if eta is not None and eta[1] > at - now:
            n += 1
    return n


def plan_budget(state: LiveState, now: float, *, clear_by: float | None = None, meet_due: bool = False,
                bound: int = MAX_BUDGET) -> PlanAnswer:
    """The smallest budget that clears the ordered backlog by ``clear_by`` (absolute time), or
    (``meet_due``) leaves no chart's ETA after its due time. Spoils ``state``."""
    if (clear_by is None) == (not meet_due):
        raise ValueError("give clear_by or meet_due, one of them")
    goal = "clear_by" if clear_by is not None else "meet_due"
    q = state.queue
    current = q.budget
    set_aside = len(q.held) + len(q.paused)
    lo = max([1, *(q.cost_of(c.org, c.workflow) for c in _unheld(state))])
    if lo > bound:
        return PlanAnswer(goal, None, current, 0, None, 0, set_aside,
                          f"no budget up to {bound:,} runs every chart: one costs {lo:,}")
    with gc_paused():
        q._budget = lo
        whatif.rerank_all(q)  # as a budget change re-ranks; no chart changes class above lo
    probes = 0
    memo: dict[int, tuple[bool, float, int]] = {}

    def probe(b: int) -> tuple[bool, float, int]:
        nonlocal probes
        if b not in memo:
            probes += 1
            q._budget = b
            captured = state.capture()
            with gc_paused():
                report = captured.eta_report(now)
                late = _late(captured, report.etas, now) if meet_due else 0
            ok = report.clear_s <= clear_by - now if clear_by is not None else late == 0
            memo[b] = (ok, report.clear_s, late)
        return memo[b]

    top = probe(bound)
    if not top[0]:
        why = (f"no budget up to {bound:,} clears the backlog by then (at {bound:,}: "
               f"{top[1]:.0f} s from now)" if clear_by is not None
               else f"no budget up to {bound:,} keeps every due time ({top[2]} late even at {bound:,})")
        return PlanAnswer(goal, None, current, probes, top[1], top[2], set_aside, why)
    a, b = lo - 1, bound  # f(a) false (or below the range), f(b) true
    if probe(lo)[0]:
        b = lo
    else:
        a = lo
        # gallop up from lo (the answer is usually near the work over the time), then bisect
        step = max(1, lo)
        while a + step < b and not probe(a + step)[0]:
            a, step = a + step, step * 2
        b = min(b, a + step)
        while b - a > 1:
            mid = (a + b) // 2
            if probe(mid)[0]:
                b = mid
            else:
                a = mid
    ok, clear_s, late = probe(b)
    verified = b == lo or not probe(b - 1)[0]
    why = (f"budget {b:,} clears the backlog by then" if clear_by is not None
           else f"budget {b:,} keeps every due time")
    why += f" (now {current:,})"
    if not verified:
        why += "; one less does too (the forecast is not monotone here): smaller budgets may also do"
    if set_aside:
        why += f"; {set_aside:,} held or paused charts left out (no budget runs them)"
    return PlanAnswer(goal, b, current, probes, clear_s, late, set_aside, why)


def _unheld(state: LiveState):
    """The queued charts a budget can run: in the order, or blocked (not held, not paused)."""
    q = state.queue
    for keys in q._order.sublists():
        for k in keys:
            yield _Pair(*k[6])
    for cid in q.blocked:
        c = q.get(cid)
        if c is not None:
            yield _Pair(c.org, c.workflow)


@dataclass(frozen=True, slots=True)
class _Pair:
    org: str
    workflow: str | None
