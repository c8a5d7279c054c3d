"""The values :class:`~fairsched.engine.state.LiveState` hands out: a running chart
(:class:`InFlight`), what the live loop must carry out after a change (:class:`Effects`)
and the copy an ETA pass reads (:class:`PassInput`)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduling import Durations, EtaReport, QueuedChart, RunningChart
from scheduling.queue import FairQueue
from scheduling.forecast import Forecaster
from scheduling.modes import Dispatch, EtaModel
from fairsched.engine.due_states import DueInput
from fairsched.engine.store.rows import OrgRow


@dataclass(slots=True)
class InFlight:
    """A chart in flight and the cost it holds (a later cost change never touches it)."""

    id: int
    org: int
    workflow: str
    started_at: float
    cost: int
    external_id: str | None = None
    run_id: str = ""
    cancel_requested: bool = False
    cancel_sent: bool = False
    closing: bool = False  # the row is final; waiting for Temporal to confirm the close
    created_at: float = 0.0  # its due time may be created_at + its org's turnaround
    # with pools, what it draws on since it started (None: its pair's now, as after a restart)
    demand: tuple | None = None

    def core(self) -> RunningChart:
        return RunningChart(str(self.id), str(self.org), self.workflow, self.started_at, self.cost, self.demand)


@dataclass(slots=True)
class Effects:
    """What the live loop must carry out after a change."""

    cancel: set[int] = field(default_factory=set)    # cancel these charts' workflows
    watch: set[int] = field(default_factory=set)     # watch these workflows' results
    unwatch: set[int] = field(default_factory=set)   # stop watching
    eta_now: bool = False                            # budget / weight / cost changed
    # for open pages: the wire form of common.live_updates events (the loop logs them too)
    events: list[dict] = field(default_factory=list)

    def merge(self, other: "Effects") -> "Effects":
        self.cancel |= other.cancel
        self.watch |= other.watch
        self.unwatch |= other.unwatch
        self.eta_now |= other.eta_now
        self.events.extend(other.events)
        return self

    def __bool__(self) -> bool:
        return bool(self.cancel or self.watch or self.unwatch or self.eta_now or self.events)


@dataclass(frozen=True, slots=True)
class PassInput:
    """What one ETA pass and its snapshot read, copied from :class:`LiveState` on the
    loop in milliseconds (:meth:`LiveState.capture`), so the pass itself (O(backlog)
    pure Python) runs in another thread while the loop keeps dispatching."""

    queue: FairQueue              # FairQueue.frozen_copy(): read only
    forecast: Forecaster          # a copy of what was learned
    durations: Durations
    eta_model: EtaModel
    running: tuple[InFlight, ...]  # copies
    orgs: tuple[OrgRow, ...]
    external_ids: Mapping[int, str | None]  # an ExternalIds (engine/store/external_ids.py), or a dict
    queued_by_org: dict[int, int]
    aside: dict[str, list[QueuedChart]]  # held / paused / blocked charts, in arrival order
    queued: int                          # all queued charts (ordered and set aside)
    unpromised: set[str]                 # charts without a first ETA (LiveState.unpromised)
    due: DueInput | None = None          # due times and warning levels (fairsched.engine.due_states)

    @property
    def budget(self) -> int:
        return self.queue.budget

    def running_charts(self) -> list[RunningChart]:
        return [r.core() for r in self.running]

    @property
    def forecast_pass(self) -> bool:
        """Whether :meth:`eta_report` is the forecast's pass: the model is the forecast, the
        dispatch strict, and no pool has limits (with pools, the forecast's pass is the
        pools' lane walk; with limits, and under backfill, the queue's own pass is)."""
        pools = self.queue.pools
        return (self.eta_model is EtaModel.FORECAST and self.queue.dispatch_policy is not Dispatch.BACKFILL
                and (pools is None or not pools.has_limits))

    def eta_report(self, now: float) -> EtaReport:
        """The ETA pass of the configured model, on this copy (the only one: a pass reads a
        copy, :meth:`LiveState.capture`)."""
        if self.forecast_pass:
            return self.forecast.etas(self.queue, self.running_charts(), now)
        # lanes, and always under backfill: the reservations dispatch makes, same depth and
        # durations (docs/scheduling.md, "Backfill": ETA and dispatch agree); with pools and
        # limits, the pools' event pass (the forecast's pass with pools knows no limits)
        return self.queue.etas(self.running_charts(), now, estimate=self.durations)
