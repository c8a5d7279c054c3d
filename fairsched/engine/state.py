"""The scheduler's in-memory state and every change to it: no I/O, no clock.

:class:`LiveState` owns the fair order (a :class:`scheduling.queue.FairQueue`),
the running charts with the cost each was dispatched with, and what the
snapshot needs to name things (orgs, external ids). The live loop
(:mod:`fairsched.engine.scheduler`) reads rows from the database, hands them to
these methods and carries out the :class:`Effects` they return (cancel a
workflow, watch or stop watching a workflow's result, run the ETA pass now).

Rows are the truth (:meth:`LiveState.apply_chart`, one re-read row, whatever it was
before; :meth:`LiveState.apply_world`, everything), but for a chart whose commit is to land.
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import replace

from common import live_updates as lu
from scheduling import Durations, Eta, QueuedChart, RunningChart, is_held
from scheduling.queue import FairQueue
from scheduling.forecast import Forecaster
from scheduling.modes import Dispatch, Share
from scheduling.plan import gc_paused
from fairsched.engine.store.chart_columns import ChartColumns
from fairsched.engine.due_states import DueBook
from fairsched.engine.store.external_ids import ExternalIds
from fairsched.engine.live_types import Effects, PassInput, InFlight
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World, durations_of

log = logging.getLogger("fairsched.engine")

QUEUED, RUNNING = "queued", "running"
FINAL = frozenset({"succeeded", "failed", "cancelled"})


class LiveState:
    """The fair order, the running charts and their names: one owner, no I/O."""

    def __init__(self, world: World, *, observe_arrivals: bool = True, horizon: tuple | None = None,
                 truncated: frozenset[str] | None = None) -> None:
        """``observe_arrivals``: teach the forecast the backlog's arrivals; a caller that
        calls :meth:`learn_history` right after (the scheduler) skips it: that starts the
        forecast afresh from the database's recent history (at 1M charts, seconds saved).

        ``horizon``: ``world`` holds only the head of the saved order (a restart's first
        read, :func:`fairsched.engine.store.db.read_head`): the state is *partial*
        (:attr:`partial`). It dispatches up to the horizon, follows its running charts and
        new priority charts, and leaves every other change to the whole backlog's state,
        which takes over from it (:meth:`take_over_from`). Raises
        :class:`~scheduling.NeedsWholeBacklog` if the saved order cannot resume
        from its head alone.

        ``truncated``: these orgs have more charts without a round than the first by rank
        that ``world`` holds (a first start, ``FairQueue.first_head``, or a restart amid
        its backfill): the state is partial in the same way."""
        with gc_paused():  # at start-up: several small acyclic objects per chart, a million charts
            self._load(world, observe_arrivals, horizon, truncated)

    @property
    def partial(self) -> bool:
        """Only the head of the order is loaded (see ``horizon`` in :meth:`__init__`)."""
        return self.queue.partial

    def _load(self, world: World, observe_arrivals: bool, horizon: tuple | None = None,
              truncated: frozenset[str] | None = None) -> None:
        self.config = world.config
        self.truncated: frozenset[str] = frozenset(truncated or ())  # see __init__
        self.orgs: dict[int, OrgRow] = {o.id: o for o in world.orgs}
        weights = {str(o.id): o.weight for o in world.orgs}
        charts = ChartColumns.of(world.charts)  # a row made per chart as it is read, none kept
        ours = bytearray(o in self.orgs for o in charts.org)
        queued = charts.where(bytearray(s == QUEUED and k for s, k in zip(charts.state, ours)))
        self.durations = durations_of(world.averages)
        # What the queue's pass over the rows notes of each (below): the id's int and string
        # are the queue's own, one copy each.
        self.external_ids = ExternalIds()  # as bytes, not a str per chart (engine/store/external_ids.py)
        # Charts whose first ETA is not recorded yet (the scheduler removes those the
        # database already has at start-up): each pass records only these, O(new).
        self.unpromised: set[str] = set()
        self.queued_by_org: Counter[int] = Counter(queued.org)
        # the policies; under Share.WORK a chart's work is its cost x this estimate when it
        # arrives (then fixed: persisted as Chart.fair_est_s); backfill reserves by it too
        policies = dict(world.config.policies, estimate=self._estimate, pools=world.config.pools)
        if world.rounds is not None:
            # A restart or a takeover: resume the persisted rounds, never head = 0.
            self.queue = FairQueue.restore(
                self._entering(queued, with_round=True, work=world.config.share is Share.WORK), state=world.rounds,
                budget=world.config.budget, weights=weights, costs=dict(world.costs), horizon=horizon,
                truncated=truncated, **policies)
        elif truncated:
            self.queue = FairQueue.first_head(
                self._entering(queued), truncated=truncated, budget=world.config.budget,
                weights=weights, costs=dict(world.costs), **policies,
            )
        else:
            self.queue = FairQueue.from_backlog(
                self._entering(queued), budget=world.config.budget, weights=weights,
                costs=dict(world.costs), track_rounds=True, **policies,
            )
        # The forecast's statistics: each org's arrivals (O(1) per arrival) and finished
        # durations (O(1) per finish); its prior is the historical means above.
        self.forecast = Forecaster(self._prior)
        if observe_arrivals:
            for i in sorted(range(len(charts)), key=charts.created_at.__getitem__):
                if ours[i]:
                    self.forecast.observe_arrival(str(charts.org[i]), charts.workflow[i], charts.created_at[i])
        self.loaded_at = world.read_at
        self.running: dict[int, InFlight] = {}
        self.committing: set[int] = set()  # started, their rows' commit still to land (Dispatcher)
        for c in charts.where(s == RUNNING for s in charts.state):
            self._add_running(c).demand = world.running_pools.get(c.id)
            if c.org in self.orgs:
                self.unpromised.add(str(c.id))
        self.due = DueBook.load(charts.where(k and (x or bool(a)) for k, x, a in
                                             zip(ours, charts.due_explicit, charts.due_alert)))

    def _entering(self, queued: ChartColumns, **how) -> Iterator[QueuedChart]:
        """Each queued row as the core's chart (``how``: :meth:`ChartRow.queued_chart`), its
        external id and its id (unpromised) noted on the way."""
        ext, unpromised = self.external_ids, self.unpromised
        for c, external_id in zip(queued.queued_charts(**how), queued.external_id):
            ext[c.seq] = external_id
            unpromised.add(c.id)
            yield c

    # ------------------------------------------------------------- reading
    @property
    def budget(self) -> int:
        return self.queue.budget

    @property
    def used(self) -> int:
        return sum(r.cost for r in self.running.values())

    @property
    def free(self) -> int:
        """Free budget; negative after the budget was lowered under running work."""
        return self.budget - self.used

    def _estimate(self, org: str, workflow: str | None) -> float:
        """The ETA model's estimate now (the durations in force: apply_averages replaces them)."""
        return self.durations(org, workflow)

    def work_of(self, changes) -> dict[str, tuple[float | None, float | None]]:
        """Share.WORK: for each chart of ``changes`` (a round save's) still queued, its
        estimate at arrival and its share, to persist beside its round (Chart.fair_est_s,
        fair_share). Empty under Share.CHARTS: a chart's share there is 1, its row's is not read
        (``ChartRow.queued_chart``), and its estimate at arrival is written when it was set."""
        out: dict[str, tuple[float | None, float | None]] = {}
        if self.queue.share is not Share.WORK:
            return out
        get = self.queue.get
        for cid in changes:
            q = get(cid)
            if q is not None and (q.est_s is not None or q.share is not None):
                out[cid] = (q.est_s, q.share)
        return out

    def learn_history(self, arrivals, durations, promises=()) -> None:
        """Start the forecast afresh from the database's recent history: ``arrivals``
        (org, workflow, created at) of every chart created lately, finished or not,
        ``durations`` (org, workflow, seconds) of the latest successful charts and
        ``promises`` (created, first ETA, finished) of the latest that had an ETA."""
        self.forecast = Forecaster(self._prior)
        for org, wf, at in arrivals:
            self.forecast.observe_arrival(org, wf, at)
        for org, wf, seconds in durations:
            self.forecast.observe_finish(org, wf, seconds)
        for at, eta_at, finished_at in promises:
            self.forecast.observe_promise(at, eta_at, finished_at)

    def first_etas(self, etas: Mapping[str, Eta], now: float, ids) -> dict[int, tuple[float, float]]:
        """For the charts ``ids`` (keys of ``etas``, an ETA pass's): the absolute ETA and p90
        finish to record as their first; the forecast remembers each promise (created at ->
        ETA) to calibrate its p90 on the chart's finish."""
        p90 = self.forecast.p90_finisher()
        out = {}
        for cid in ids:
            eta = etas[cid]
            q = self.queue.get(cid)
            if q is not None:
                org, wf, created = q.org, q.workflow, q.created_at
            else:
                r = self.running.get(int(cid))
                if r is None:
                    continue
                org, wf, created = str(r.org), r.workflow, r.started_at
            out[int(cid)] = (now + eta[1], now + p90(org, wf, eta))
            self.forecast.record_eta(cid, created, now + eta[1])
        return out

    def _prior(self, org: str, workflow: str | None) -> float:
        return self.durations(org, workflow)

    def running_charts(self) -> list[RunningChart]:
        return [r.core() for r in self.running.values()]

    def capture(self, copy: bool = True) -> PassInput:
        """What an ETA pass reads (see :class:`PassInput`): a consistent copy, for a pass in a
        thread while the loop goes on; ``copy=False``: the state's own structures, for a
        forked child, whose memory is that copy already (copies there are pages of its own)."""
        queue = self.queue
        aside = {state: [queue.get(cid) for cid in getattr(queue, state)] for state in ("held", "paused", "blocked")}
        if copy:
            read, forecast = queue.frozen_copy(), self.forecast.copy(self.durations)
            ext, by_org, unpromised = self.external_ids.copy(), dict(self.queued_by_org), set(self.unpromised)
        else:
            read, forecast, ext, by_org, unpromised = queue, self.forecast, self.external_ids, self.queued_by_org, self.unpromised
        return PassInput(
            queue=read, forecast=forecast, durations=self.durations, eta_model=self.config.eta_model,
            running=tuple(replace(r) for r in self.running.values()), orgs=tuple(self.orgs.values()),
            external_ids=ext, queued_by_org=by_org, aside=aside, queued=len(queue), unpromised=unpromised,
            due=self.due.capture(self.orgs.values(), copy=copy),
        )

    def counters(self) -> dict:
        """Cheap counters for every dashboard event, O(orgs)."""
        held, paused, blocked = len(self.queue.held), len(self.queue.paused), len(self.queue.blocked)
        running_by_org: Counter[int] = Counter()
        used_by_org: Counter[int] = Counter()
        for r in self.running.values():
            running_by_org[r.org] += 1
            used_by_org[r.org] += r.cost
        return {
            "queued": len(self.queue), "ordered": self.queue.order_len, "running": len(self.running),
            "held": held, "paused": paused, "blocked": blocked,
            "budget": self.budget, "used": self.used,
            "orgs": {str(o): {"queued": self.queued_by_org.get(o, 0), "running": running_by_org.get(o, 0),
                              "used_cost": used_by_org.get(o, 0)} for o in self.orgs},
        }

    # ------------------------------------------------------------- settings and orgs
    def apply_config(self, config: Config) -> Effects:
        fx = Effects()
        if config.eta_model != self.config.eta_model:
            log.info("ETA model set to %s", config.eta_model)
            fx.eta_now = True
        if self.queue.set_budget(config.budget):
            log.info("budget set to %d (running cost %d; running work is never stopped)", config.budget, self.used)
            fx.eta_now = True
            fx.events.append(lu.Budget(budget=config.budget).to_wire())
        if self.queue.set_pools(config.pools):  # pools, what pairs draw on, limits (docs/scheduling.md, "Pools")
            log.info("capacity pools set to %s", "none (the budget alone)" if config.pools is None
                     else ", ".join(f"{p} {c}" for p, c in config.pools.capacity.items()))
            fx.eta_now = True
        if self.queue.set_policies(**config.policies):  # a share or quantum change re-ranks every org
            log.info("policies set to share %s (quantum %gs), dispatch %s", config.share, config.quantum_s,
                     config.dispatch)
            fx.eta_now = True
        self.config = config
        return fx

    def apply_orgs(self, orgs: list[OrgRow]) -> Effects:
        fx = Effects()
        for o in orgs:
            self.orgs[o.id] = o
            if self.queue.set_weight(str(o.id), o.weight):
                fx.eta_now = True
                fx.events.append(lu.Weight(org=o.id, weight=o.weight, held=is_held(o.weight)).to_wire())
        return fx

    def apply_costs(self, costs: dict[tuple[str, str], int], pairs: set[tuple[str, str]] | None = None) -> Effects:
        """Set the costs of ``pairs`` (all pairs if None) to ``costs`` (absent: 1)."""
        fx = Effects()
        current = self.queue.costs
        todo = pairs if pairs is not None else set(current) | set(costs)
        for pair in sorted(todo, key=str):
            if pair[0] not in self.queue.weights:
                continue
            cost = costs.get(pair, 1)
            if current.get(pair, 1) != cost and self.queue.set_cost(pair[0], pair[1], cost):
                fx.eta_now = True
                fx.events.append(lu.Cost(org=int(pair[0]), workflow=pair[1], cost=cost).to_wire())
        return fx

    def apply_averages(self, averages: Durations | Mapping) -> None:
        self.durations = durations_of(averages)

    # ------------------------------------------------------------- charts
    def apply_chart(self, chart_id: int, row: ChartRow | None) -> Effects:
        """Make memory agree with the re-read ``row`` (None: the row is gone). A partial
        state applies only what it can place (:meth:`_head_applies`)."""
        if self.queue.partial and not self._head_applies(chart_id, row):
            return Effects()  # the whole backlog's state applies it (the resync after the take-over)
        self.due.apply(chart_id, row)
        if row is None or row.state in FINAL:
            return self._chart_gone(chart_id, row)
        if row.org not in self.orgs:
            return Effects()  # an org we have not read yet: the caller reads orgs first
        if row.state == RUNNING:
            return self._chart_running(chart_id, row)
        return self._chart_queued(chart_id, row)

    def _head_applies(self, chart_id: int, row: ChartRow | None) -> bool:
        """What a partial state applies: a row that is gone, final or running (a chart
        leaving the order is logged for the replay; running ones hold their cost), a new
        priority chart (it holds no round), and a row that agrees with the chart in the
        head. Anything else waits for the whole backlog: a normal-tier arrival, a queued
        row of a chart not loaded, a requeue (the chart keeps holding its cost meanwhile).
        A loaded chart that changed (paused, moved, prioritised...) stops the dispatch from
        the head: its new place needs the whole order."""
        if row is None or row.state != QUEUED:
            return True
        if chart_id in self.running:
            return False
        q = self.queue.get(str(chart_id))
        if q is None:
            return row.priority and row.round is None and row.org in self.orgs
        if (q.org, q.workflow, q.created_at, q.paused, q.priority, q.front_at) == \
                (str(row.org), row.workflow, row.created_at, row.paused, row.priority, row.front_at):
            return True
        self.queue.close_horizon(everything=True)
        return False

    def take_over_from(self, head: "LiveState") -> list[str]:
        """This state, the whole backlog read in the same snapshot as the partial state
        ``head``, takes over from it: what the head dispatched or removed leaves this
        order exactly as it left the head's (``FairQueue.replay``: ``head`` and the rounds
        move the same), and the head's running charts are the running charts. What else
        changed since the read (arrivals, operators' changes) the caller's resync applies.
        Returns the ids taken out of the order."""
        taken = []
        for cid, org in self.queue.replay(head.queue.start_log or (), head.queue._guard_holds):
            chart_id = int(cid)
            self.queued_by_org[int(org)] -= 1
            self.external_ids.pop(chart_id, None)
            taken.append(cid)
        self.running, self.committing = head.running, head.committing
        self.unpromised |= {str(c) for c in head.running}
        return taken

    def _chart_gone(self, chart_id: int, row: ChartRow | None) -> Effects:
        """The row is final or deleted: it leaves the order; a running chart starts closing."""
        fx = Effects()
        if str(chart_id) in self.queue:
            self._remove_queued(chart_id)
            fx.events.append(lu.Removed(chart=chart_id, state=row.state if row else "deleted").to_wire())
        r = self.running.get(chart_id)
        if r is not None and not r.closing:
            # Recorded (by its workflow's last activity), but its cost stays held until Temporal
            # says it closed (the watch or reconcile: finished()): never more than the budget.
            r.closing = True
            fx.watch.add(chart_id)
        return fx

    def _chart_running(self, chart_id: int, row: ChartRow) -> Effects:
        """The row runs: new to us or already ours, with its run id and cancel request."""
        fx = Effects()
        cid = str(chart_id)
        if cid in self.queue:
            self._remove_queued(chart_id)  # dispatched elsewhere (another scheduler, an adoption)
        r = self.running.get(chart_id)
        if r is None:
            r = self._add_running(row)
            self.unpromised.add(cid)  # new to us: its first ETA (if none yet) comes next pass
            fx.watch.add(chart_id)
            fx.events.append(lu.Running(chart=chart_id, org=row.org).to_wire())
        r.cancel_requested = row.cancel_requested
        if row.run_id:
            r.run_id = row.run_id
        if r.cancel_requested and not r.cancel_sent:
            fx.cancel.add(chart_id)
        return fx

    def _chart_queued(self, chart_id: int, row: ChartRow) -> Effects:
        """The row is queued: new to the order, or a change of one already in it."""
        fx = Effects()
        if chart_id in self.committing:
            return fx  # read before its commit landed: the row is behind memory, not the truth yet
        if chart_id in self.running:  # requeued behind our back: the row wins (Temporal's listing re-adopts)
            self.running.pop(chart_id)
            fx.unwatch.add(chart_id)
        q = self._queued_as(chart_id, row)
        if q is None:
            self._add_queued(chart_id, row, fx)
            return fx
        self.external_ids[chart_id] = row.external_id
        self._update_queued(chart_id, row, q, fx)
        return fx

    def _queued_as(self, chart_id: int, row: ChartRow) -> QueuedChart | None:
        """The chart in the order if it is the same chart as ``row``; a different one is removed."""
        q = self.queue.get(str(chart_id))
        if q is not None and (q.org != str(row.org) or q.workflow != row.workflow or q.created_at != row.created_at):
            self._remove_queued(chart_id)
            q = None
        return q

    def _add_queued(self, chart_id: int, row: ChartRow, fx: Effects) -> None:
        """A queued chart new to the order (an arrival, unless we knew it before)."""
        if chart_id not in self.external_ids:
            self.forecast.observe_arrival(str(row.org), row.workflow, row.created_at)
            self.unpromised.add(str(chart_id))
        self.queue.add(row.queued_chart())
        self.external_ids[chart_id] = row.external_id
        self.queued_by_org[row.org] += 1
        fx.events.append(lu.Queued(chart=chart_id, org=row.org).to_wire())

    def _update_queued(self, chart_id: int, row: ChartRow, q: QueuedChart, fx: Effects) -> None:
        """A chart in the order whose row changed: paused or resumed, priority, moved to the front."""
        cid = str(chart_id)
        if row.paused != q.paused:
            (self.queue.pause if row.paused else self.queue.resume)(cid)
            fx.events.append((lu.Paused if row.paused else lu.Resumed)(chart=chart_id).to_wire())
        if row.priority != q.priority:
            if row.priority:
                self.queue.prioritize(cid, row.prioritized_at)
            else:
                self.queue.unprioritize(cid)
            fx.events.append((lu.Prioritized if row.priority else lu.Unprioritized)(chart=chart_id).to_wire())
        if row.front_at is not None and row.front_at != q.front_at:
            self.queue.move_to_front(cid, row.front_at)
            fx.events.append(lu.MovedToFront(chart=chart_id).to_wire())

    def apply_settings(self, config: Config, orgs: list[OrgRow], costs: dict[tuple[str, str], int],
                       averages: Durations | Mapping) -> Effects:
        """The small tables of a resync: settings, orgs, costs, duration averages."""
        fx = self.apply_orgs(orgs)
        fx.merge(self.apply_config(config))
        fx.merge(self.apply_costs(costs))
        self.apply_averages(averages)
        return fx

    def known_ids(self) -> set[int]:
        """Every chart in memory, queued or running."""
        return set(self.external_ids) | set(self.running)

    def knows(self, chart_id: int) -> bool:
        """``chart_id`` is in memory, queued or running: :meth:`known_ids` without a set made
        (a million ints at 1M queued, made on the loop after a pass)."""
        return chart_id in self.external_ids or chart_id in self.running

    def apply_world(self, world: World) -> Effects:
        """The periodic resync: everything in memory agrees with ``world`` afterwards."""
        fx = self.apply_orgs(world.orgs)
        fx.merge(self.apply_config(world.config))
        fx.merge(self.apply_costs(world.costs))
        self.apply_averages(world.averages)
        seen: set[int] = set()
        for row in world.charts:
            seen.add(row.id)
            fx.merge(self.apply_chart(row.id, row))
        stale = [c for c in self.external_ids if c not in seen] + [c for c in self.running if c not in seen]
        for chart_id in stale:
            fx.merge(self.apply_chart(chart_id, None))
        return fx

    # ------------------------------------------------------------- dispatch
    def to_start(self, now: float = 0.0) -> list[str]:
        """What the dispatch policy starts in the free budget (not yet removed): under
        ``strict`` the head of the order that fits; under ``backfill`` the charts whose
        reservation is now, given the running charts' estimated finishes from ``now`` (epoch
        seconds) by the durations in force, the ETA pass's (docs/scheduling.md, "Backfill")."""
        if self.queue.pools is not None:  # the pools' walk (or reservations): each pool's room, not the budget's
            return self.queue.peek(0, self.running_charts(), now, self.durations)
        free = self.free
        if free <= 0:
            return []
        if self.queue.dispatch_policy is Dispatch.BACKFILL:
            return self.queue.peek(free, self.running_charts(), now, self.durations)
        return self.queue.peek(free)

    def commit_dispatch(self, planned: list[str], started: dict[str, tuple[str, float]]) -> list[InFlight]:
        """Charts of ``planned`` (from :meth:`to_start`) that really started on Temporal
        (``started``: id -> (run id, start time)) leave the order and hold their cost.

        The longest started prefix is dispatched through the core (rounds persist,
        ``head`` moves); a start that succeeded after one that failed is taken out
        with ``remove``. Returns the new running charts."""
        prefix_cost = 0
        prefix = 0
        for cid in planned:
            if cid not in started:
                break
            q = self.queue.get(cid)
            prefix_cost += self.queue.cost_of(q.org, q.workflow)
            prefix += 1
        costs, demands = self._held_by(started)
        pools = self.queue.pools
        out_of_order = pools is not None or self.queue.dispatch_policy is Dispatch.BACKFILL
        if out_of_order:  # not a prefix of the order: exactly what started
            charts = {c.id: c for c in self.queue.dispatch_ids([cid for cid in planned if cid in started])}
        else:
            charts = {c.id: c for c in self.queue.dispatch(prefix_cost)} if prefix else {}
        if not out_of_order and list(charts) != planned[:prefix]:  # never expected: the order did not change in between
            log.error("dispatch mismatch: planned %s, core dispatched %s", planned[:prefix], list(charts))
        for cid in started:
            if cid not in charts:
                q = self.queue.remove(cid)
                if q is not None:
                    charts[cid] = q
        out = []
        for cid, q in charts.items():
            chart_id = int(cid)
            self.queued_by_org[int(q.org)] -= 1
            run_id, at = started.get(cid, ("", 0.0))
            r = InFlight(chart_id, int(q.org), q.workflow, at, costs.get(cid, 1),
                        self.external_ids.pop(chart_id, None), run_id, created_at=q.created_at,
                        demand=demands.get(cid))
            self.running[chart_id] = r
            out.append(r)
        return out

    def _held_by(self, started) -> tuple[dict[str, int], dict[str, tuple]]:
        """What each started chart holds from now on: its cost, and with pools its demand
        (a later change of either never touches in-flight work)."""
        charts = {cid: q for cid in started if (q := self.queue.get(cid)) is not None}
        costs = {cid: self.queue.cost_of(q.org, q.workflow) for cid, q in charts.items()}
        pools = self.queue.pools
        return costs, ({} if pools is None else {cid: pools.demand(q.org, q.workflow) for cid, q in charts.items()})

    def hold_closing(self, row: ChartRow) -> Effects:
        """A final ``row`` whose workflow Temporal still runs (found by the reconciliation
        after a restart): it holds its dispatched cost, as a closing chart, until
        :meth:`finished`."""
        fx = Effects()
        if row.id in self.running or row.org not in self.orgs:
            return fx
        self._add_running(row).closing = True
        fx.watch.add(row.id)
        log.info("chart #%d is %s but its workflow still runs: its cost %d stays held until it closes",
                 row.id, row.state, self.running[row.id].cost)
        return fx

    def finished(self, chart_id: int, state: str = "", seconds: float | None = None,
                 finished_at: float | None = None) -> Effects:
        """A running chart's workflow closed (Temporal says so): its cost is free again.
        ``seconds``: how long a successful run took, ``finished_at`` when (the forecast
        learns durations and how far off its first ETA was)."""
        fx = Effects()
        r = self.running.pop(chart_id, None)
        if r is not None and seconds is not None and state == "succeeded":
            self.forecast.observe_finish(str(r.org), r.workflow, seconds, chart_id=str(chart_id),
                                         finished_at=finished_at)
        elif r is not None and state != "requeued":
            self.forecast.forget(str(chart_id))
        if state != "requeued":
            self.unpromised.discard(str(chart_id))
        if r is not None:
            fx.unwatch.add(chart_id)
            fx.events.append(lu.Finish(chart=chart_id, org=r.org, state=state, cost=r.cost).to_wire())
        return fx

    # ------------------------------------------------------------- internals
    def _remove_queued(self, chart_id: int) -> None:
        self.forecast.forget(str(chart_id))
        self.unpromised.discard(str(chart_id))
        q = self.queue.remove(str(chart_id))
        self.external_ids.pop(chart_id, None)
        if q is not None:
            self.queued_by_org[int(q.org)] -= 1

    def _add_running(self, row: ChartRow) -> InFlight:
        cost = row.dispatched_cost or self.queue.cost_of(str(row.org), row.workflow)
        r = InFlight(row.id, row.org, row.workflow, row.started_at or 0.0, cost, row.external_id, row.run_id,
                    row.cancel_requested, created_at=row.created_at)
        self.running[row.id] = r
        return r
