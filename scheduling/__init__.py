"""Fairsched's pure scheduling core: no Django, no I/O, no clock of its own.

Exact semantics: ``docs/scheduling.md`` (the static plan, the persistent
weighted round-robin and the simulator). Every time is a float in seconds chosen by the caller; ETAs are
seconds from the ``now`` the caller passes.

Public API
----------
Values (:mod:`scheduling.types`; ``Durations`` in :mod:`scheduling.lanes`)
    ``QueuedChart(id, org, workflow, created_at, seq, priority=False,
    prioritized_at=None, paused=False, front_at=None, round=None)``,
    ``RunningChart(id, org, workflow, started_at, cost)``,
    ``Eta(start_s, finish_s)``, ``Durations(averages, default_avg_s, expected, counts)`` (callable
    ``(org, workflow) -> seconds``; ``source(org, workflow)`` says where an estimate came from,
    an :class:`EstimateSource`), ``EtaReport(etas, org_clear_s, clear_s)``,
    ``Plan(order, dispatch, held, paused, blocked, etas, org_clear_s, clear_s, rounds)``.
Static plan (:mod:`scheduling.plan`)
    ``plan(queued, running=(), *, budget, weights, costs=None, estimate=Durations(), now=0.0) -> Plan``
    ``plan_dispatch(order, free, cost_of) -> list`` (head-of-line walk)
Live order (:mod:`scheduling.queue`)
    ``FairQueue(*, budget, weights, costs=None, policy="wrr", track_rounds=False)`` and
    ``FairQueue.from_backlog(queued, *, budget, weights, costs=None)`` (first start),
    ``FairQueue.restore(queued, *, state, budget, weights, costs=None)`` (restart or failover:
    from ``export_rounds()`` and the charts' rounds ``take_round_changes()`` reported);
    ``add``, ``remove``, ``pause``, ``resume``, ``prioritize``, ``unprioritize``,
    ``move_to_front``, ``set_weight``, ``set_cost``, ``set_budget``,
    ``peek(free)``, ``dispatch(free)``, ``etas(running, now, budget=None, estimate=...)``,
    ``plan(running, now, estimate)``, ``backlog()`` (for a dump), iteration,
    ``order()``, ``iter_charts()``, ``position(id)``, ``round_of(id)``,
    ``state_of(id)``, ``held``/``paused``/``blocked``, ``head``, ``cost_of``.
Writing many new rounds a chunk at a time (:mod:`scheduling.backfill`)
    ``RoundBackfill(rounds, saved)``: ``next_chunk(n)``, ``extend(gone_ids)``, ``drop(org)``,
    ``patch(round_state)``; each write a prefix of every org, so a restart after any of them
    restores the same order. ``FairQueue.gone_log`` and ``touched_log`` tell it what moved.
    ``RoundSaver(saved)``: what the live scheduler writes and when (``next(queue)``,
    ``written(save)``, ``start_backfill(queue, saved_rounds, minimum)``, ``chunk(n)``).
Simulator (:mod:`scheduling.contract.simulator`)
    ``simulate(arrivals, events, *, budget, weights, costs, estimate, policy, eta_model="lanes",
    forecast_params=None) -> SimResult``
Forecast ETA model (:mod:`scheduling.forecast`)
    ``Forecaster(estimate, params)``: ``observe_arrival``, ``observe_finish``, ``record_eta``,
    ``etas(queue, running, now, stop_after=None) -> EtaReport`` (the lane simulation plus each
    org's expected future arrivals in the rounds they would take), ``mean``/``median``/``p90``
    of a pair's durations, ``p90_finish``; ``PlanOrder`` reads a static plan like a queue.
Ordering keys (:mod:`scheduling.keys`): every key, tie-breaks numbered.
The rules, each one function that every path above calls: in :mod:`scheduling.rules`
    ``is_held(weight)`` (auto-hold), ``classify(weight, paused, cost, budget)``,
    ``head_of_line(costs, free)`` (the head-of-line stop); in :mod:`scheduling.share`
    ``arrival_round(head, last, used, weight)`` and ``arrival_tag`` (the arrival rules);
    in :mod:`scheduling.lanes` ``Durations`` (the duration estimate), ``initial_lanes``
    and ``lane_pass(cost_est, lanes)`` (the lane walk). The map of rule to function is
    docs/scheduling.md, "Where each rule lives in the code".
The JSON contract (:mod:`scheduling.contract.scenario`, not imported here)
    ``plan(scenario) -> dict``, ``simulate(trace, policy="wrr") -> dict``, ``dump_scenario``:
    the formats of docs/scheduling.md over this core, what ``manage.py plan``/``simulate`` and
    the live scheduler's dump call.

Move to front (``front_at``, issue 5)
-------------------------------------
An operator can move a chart to the front of its *own org's* queue. The chart
gets ``front_at`` (the time of the move). Inside its org, charts are ranked by
(1) moved charts first, (2) most recent ``front_at`` first among them,
(3) ``created_at``, (4) arrival; the rank decides the round (``rank // weight``)
in the static plan, and in the live :class:`FairQueue` a move re-ranks only that
org (its charts arrive again in that rank order from ``head``). So the moved
chart takes its org's next turn and no other org's turn moves; inside one round
the usual (created_at, arrival) tie-break still applies (with weight w > 1 the
moved chart is among its org's next w starts). A chart without ``front_at``
behaves exactly as the contract. In a scenario it is the optional queued field
``"front_at"`` (ISO timestamp or null).

Live-state notes
----------------
A queued chart keeps its round while paused or prioritised (it still holds
it), gives it back when cancelled (``FairQueue.remove``: its org's ``used``
drops if it held ``last``), and loses it when its org is re-ranked while it is
not eligible. Only :meth:`FairQueue.dispatch` moves ``head``.
"""
from .backfill import RoundBackfill, RoundSaver
from .keys import fifo_key, normal_key, org_rank_key, priority_key, queue_key
from .lanes import DECLARED_AS_N, DEFAULT_AVG_S, Durations, EstimateSource, initial_lanes, lane_pass
from .plan import plan, plan_dispatch, simulate_lanes
from .heads import NeedsWholeBacklog, first_head_of_backlog, head_of_backlog, same_rounds
from .rules import BLOCKED, HELD, ORDERED, PAUSED, classify, head_of_line, is_held
from .share import arrival_round
from .types import (ById, Eta, EtaReport, OrgRounds, Plan, WalkEtas, eta_reader,
                    QueuedChart, RoundState, RunningChart)

__all__ = [
    "BLOCKED", "HELD", "ORDERED", "PAUSED",
    "DECLARED_AS_N", "DEFAULT_AVG_S", "ById", "Durations", "EstimateSource", "Eta", "EtaReport", "WalkEtas", "eta_reader", "NeedsWholeBacklog", "OrgRounds", "Plan", "QueuedChart", "RoundBackfill",
    "RoundSaver", "RoundState", "RunningChart",
    "fifo_key", "first_head_of_backlog", "head_of_backlog", "initial_lanes", "normal_key", "org_rank_key", "plan", "plan_dispatch",
    "priority_key", "queue_key", "same_rounds", "simulate_lanes",
    "arrival_round", "classify", "head_of_line", "is_held", "lane_pass",
]
