"""What the scheduler reads of the database (:mod:`fairsched.engine.store.db`, through the store
port): the rows and settings it hands to :class:`~fairsched.engine.state.LiveState`.
Plain values, no I/O; times are epoch seconds."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from scheduling import Durations, QueuedChart, RoundState
from scheduling.pools import Pools
from scheduling.modes import Dispatch, EtaModel, Share, check_policies
from scheduling.share import DEFAULT_QUANTUM_S


@dataclass(frozen=True, slots=True)
class OrgRow:
    id: int
    name: str
    slug: str
    weight: int
    turnaround_s: float | None = None  # Org.turnaround: a chart without its own due time is due created + this


_ORG_KEYS: dict[int, str] = {}


def _org_key(org: int) -> str:
    """``str(org)``, one string per org shared by all its charts (memory at 1M charts)."""
    key = _ORG_KEYS.get(org)
    if key is None:
        key = _ORG_KEYS[org] = str(org)
    return key


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 4x (a million at start-up); never mutated
class ChartRow:
    """What the scheduler reads of one chart row (times as epoch seconds)."""

    id: int
    org: int
    workflow: str
    state: str
    created_at: float
    priority: bool = False
    prioritized_at: float | None = None
    paused: bool = False
    front_at: float | None = None
    cancel_requested: bool = False
    external_id: str | None = None
    started_at: float | None = None
    dispatched_cost: int | None = None
    run_id: str = ""
    round: int | None = None  # the persisted round (Chart.fair_round); read only at load
    due_at: float | None = None  # Chart.due_at; the scheduler keeps it only when due_explicit (engine/due_states.py)
    due_explicit: bool = False
    due_alert: str = ""          # the due warning in force (read only at load)
    est_s: float | None = None   # share "work": Chart.fair_est_s, its estimate at arrival (read only at load)
    share: float | None = None   # share "work": Chart.fair_share, its part of its round (read only at load)

    def queued_chart(self, with_round: bool = False, work: bool = True) -> QueuedChart:
        """The core's chart. ``with_round``: with its persisted round, estimate at arrival and
        (``work``: under ``Share.WORK`` only; under ``Share.CHARTS`` every chart's share is 1
        and a stale one from an earlier work period must not count) its share."""
        if not with_round:
            return QueuedChart(str(self.id), _org_key(self.org), self.workflow, self.created_at, self.id,
                               self.priority, self.prioritized_at, self.paused, self.front_at)
        return QueuedChart(str(self.id), _org_key(self.org), self.workflow, self.created_at, self.id,
                           self.priority, self.prioritized_at, self.paused, self.front_at,
                           self.round, self.est_s, self.share if work and self.round is not None else None)


@dataclass(frozen=True, slots=True)
class Config:
    budget: int
    eta_interval_s: float = 3.0
    reconcile_interval_s: float = 5.0
    eta_model: EtaModel = EtaModel.FORECAST  # given as the settings row's text, kept as the enum
    # the policies (docs/scheduling.md): FairQueue's share, quantum_s, dispatch; given as the
    # settings row's text, kept as the enums
    share: Share = Share.CHARTS
    quantum_s: float = DEFAULT_QUANTUM_S
    dispatch: Dispatch = Dispatch.STRICT
    # capacity pools (docs/scheduling.md, "Pools"): None while none is set up (no pool, no
    # cost drawing on one, no limit): the one budget, exactly as before
    pools: Pools | None = None

    @property
    def policies(self) -> dict:
        """The keyword arguments of :class:`FairQueue` (and ``set_policies``) for these settings."""
        return {"share": self.share, "quantum_s": self.quantum_s, "dispatch": self.dispatch}

    def __post_init__(self) -> None:
        share, quantum_s, dispatch = check_policies(self.share, self.quantum_s, self.dispatch)
        object.__setattr__(self, "share", share)
        object.__setattr__(self, "quantum_s", quantum_s)
        object.__setattr__(self, "dispatch", dispatch)
        try:
            object.__setattr__(self, "eta_model", EtaModel(self.eta_model))
        except ValueError:
            raise ValueError(f"eta_model: {self.eta_model!r} is not one of "
                             f"{', '.join(m.value for m in EtaModel)}") from None


@dataclass(frozen=True, slots=True)
class World:
    """One full read of the database (start-up and periodic resync)."""

    config: Config
    orgs: list[OrgRow]
    costs: dict[tuple[str, str], int]
    averages: Durations | Mapping  # the duration estimates (a plain mapping: its averages alone)
    charts: Sequence[ChartRow]  # every queued and running chart (a read's: engine.chart_columns)
    rounds: RoundState | None = None  # the persisted round-robin state (None: never saved)
    read_at: datetime | None = None   # when the read began (the incremental resync's first watermark)
    # with pools, what each running chart held when dispatched (Chart.dispatched_pools, as a
    # demand); a running chart not listed holds its pair's demand now
    running_pools: Mapping[int, tuple] = field(default_factory=dict)


def durations_of(averages: Durations | Mapping) -> Durations:
    """:attr:`World.averages` as :class:`Durations` (a plain mapping: its averages alone)."""
    return averages if isinstance(averages, Durations) else Durations(dict(averages))
