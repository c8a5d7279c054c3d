"""Values of the scheduling core, named in the words of docs/scheduling.md.

Every time is a float in seconds: absolute times (``created_at``, ``started_at``,
``now``) are epoch seconds chosen by the caller; ETAs are seconds from ``now``.
The core never reads a clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Callable, Iterator, Mapping, NamedTuple

from .modes import Share

Pair = tuple  # (org, workflow): workflow may be None


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 3x (a million at start-up); never mutated
class QueuedChart:
    """A chart waiting for budget.

    ``seq`` is its arrival number (ties of equal ``created_at`` go to the lower
    ``seq``). ``front_at`` is set when an operator moved it to the front of its
    own org's queue (latest move first). ``round`` is only read by
    :func:`plan` when replaying a live dump (see ``scenario.md``); the live
    :class:`FairQueue` assigns rounds itself.
    """

    id: str
    org: str
    workflow: str | None
    created_at: float
    seq: int
    priority: bool = False
    prioritized_at: float | None = None
    paused: bool = False
    front_at: float | None = None
    round: int | None = None
    est_s: float | None = None  # share "work": its estimated duration when it arrived
    share: float | None = None  # share "work": its part of its org's turn in its round


@dataclass(frozen=True, slots=True)
class RunningChart:
    """A chart in flight, holding ``cost`` of the budget (the cost it was dispatched with);
    with pools (:mod:`scheduling.pools`), ``demand``, what it draws on since it started
    (None: its pair's demand now)."""

    id: str
    org: str
    workflow: str | None
    started_at: float
    cost: int
    demand: tuple | None = None


class Eta(NamedTuple):
    """When a chart starts and finishes, in seconds from ``now``.

    A named tuple rather than a dataclass: the ETA pass makes one per chart of
    the whole backlog, and tuple construction is several times cheaper.
    """

    start_s: float
    finish_s: float


Estimate = Callable[[str, "str | None"], float]


@dataclass(frozen=True, slots=True)
class EtaReport:
    """Result of an ETA pass (the lane simulation).

    ``etas`` holds every running and every ordered chart; ``org_clear_s`` every
    org with a chart in ``etas`` (callers add zeros for the others), and None
    for an org with no chart there whose queued charts are all held, paused or
    blocked (they will not finish under the current settings: "clear" would be
    a lie); ``org_unplanned`` counts those charts per org (orgs with >= 1 only);
    ``clear_s`` is the latest finish, 0 if none.
    """

    etas: dict[str, Eta]
    org_clear_s: dict[str, float | None]
    clear_s: float
    org_unplanned: dict[str, int] = field(default_factory=dict)


class ById(Mapping):
    """A read-only ``id -> value`` mapping over ids held in a list, its lookup
    index built on first lookup.

    A plan of a large backlog produces its values as lists aligned with the
    order; hashing a million ids into a dict is a large share of the plan's
    time and many callers only walk the order (the JSON writer, the snapshot).
    ``head`` holds a few entries given up front (the running charts' ETAs);
    ``value(i)`` is the value of ``ids[i]``, ``values()`` all of them in order.
    ``columns``, if given, are lists aligned with ``ids`` that the values are made of
    (a writer may read them instead of making each value): see :meth:`parts`.
    Equal to any mapping with the same items.
    """

    __slots__ = ("_head", "_ids", "_value", "_values", "_index", "_columns")

    def __init__(self, head: dict, ids: list, value: Callable[[int], object], values: Callable[[], Iterator],
                 columns: tuple | None = None):
        self._head, self._ids, self._value, self._values = head, ids, value, values
        self._index: dict | None = None
        self._columns = columns

    @property
    def indexed(self) -> bool:
        """True once a lookup by id has built the index of every id (walking, ``items()``
        and ``values()`` never build it)."""
        return self._index is not None

    def parts(self) -> tuple[dict, list, tuple] | None:
        """``(head, ids, columns)`` when built with columns, else None."""
        return None if self._columns is None else (self._head, self._ids, self._columns)

    def _lookup(self) -> dict:
        if self._index is None:
            self._index = dict(zip(self._ids, range(len(self._ids))))
        return self._index

    def __getitem__(self, key):
        if key in self._head:
            return self._head[key]
        return self._value(self._lookup()[key])

    def __contains__(self, key) -> bool:
        return key in self._head or key in self._lookup()

    def __iter__(self) -> Iterator:
        return chain(self._head, self._ids)

    def __len__(self) -> int:
        return len(self._head) + len(self._ids)

    def items(self):  # in order, without the index
        return list(chain(self._head.items(), zip(self._ids, self._values())))

    def values(self):
        return list(chain(self._head.values(), self._values()))

    def __repr__(self) -> str:
        return f"ById({dict(self.items())!r})"


class WalkEtas(Mapping):
    """A full pass's ETAs (:meth:`Forecaster.etas`): ``head``, a dict (the running
    charts'), then the order's charts, in the order's walk: their ids (the walk's own
    objects) and two columns ``start``/``finish`` (``array('d')``, NaN where a chart has no
    ETA: its cost above the budget's lanes), not an :class:`Eta` in a dict per chart (about
    130 MB at a million charts in a forked pass). A reader that walks the order reads the
    ETA at each place (:meth:`at`, O(1)); a lookup by id builds the index on first use.
    Equal to any mapping with the same items (the charts that have an ETA)."""

    __slots__ = ("head", "ids", "start", "finish", "_index", "_n")

    def __init__(self, head: dict, ids: list, start, finish) -> None:
        self.head, self.ids, self.start, self.finish = head, ids, start, finish
        self._index: dict | None = None
        self._n: int | None = None

    @property
    def indexed(self) -> bool:
        """True once a lookup by id has built the index of every chart (a reader by
        place, :meth:`at` at the walk's own place, never builds it)."""
        return self._index is not None

    def at(self, pos: int, chart_id: str) -> Eta | None:
        """The ETA of ``chart_id``, at place ``pos`` of the walk this pass made (if it is
        not there, a pass over another order, by its id); None without one."""
        ids = self.ids
        if pos < len(ids) and ids[pos] is chart_id:
            f = self.finish[pos]
            return None if f != f else Eta(self.start[pos], f)
        return self.get(chart_id)

    def _lookup(self) -> dict:
        if self._index is None:
            self._index = {c: i for i, (c, f) in enumerate(zip(self.ids, self.finish)) if f == f}
        return self._index

    def __getitem__(self, key) -> Eta:
        got = self.head.get(key)
        if got is not None:
            return got
        i = self._lookup()[key]
        return Eta(self.start[i], self.finish[i])

    def __contains__(self, key) -> bool:
        return key in self.head or key in self._lookup()

    def __iter__(self) -> Iterator:
        return chain(self.head, (c for c, f in zip(self.ids, self.finish) if f == f))

    def __len__(self) -> int:
        if self._n is None:
            self._n = sum(1 for f in self.finish if f == f)
        return len(self.head) + self._n

    def __repr__(self) -> str:
        return f"WalkEtas({dict(self.items())!r})"


def eta_reader(etas: Mapping) -> Callable[[int, str], "Eta | None"]:
    """``(place in the order's walk, chart id) -> Eta or None`` over a pass's ``etas``: by
    place for :class:`WalkEtas`, by id for a dict."""
    if isinstance(etas, WalkEtas):
        return etas.at
    get = etas.get
    return lambda _pos, chart_id: get(chart_id)


class LazyMapping(Mapping):
    """A read-only mapping made by ``make()`` on its first use (a plan's rounds: the
    JSON writer never reads them)."""

    __slots__ = ("_make", "_made")

    def __init__(self, make: Callable[[], Mapping]):
        self._make = make
        self._made: Mapping | None = None

    def _m(self) -> Mapping:
        if self._made is None:
            self._made = self._make()
        return self._made

    def __getitem__(self, key):
        return self._m()[key]

    def __contains__(self, key) -> bool:
        return key in self._m()

    def __iter__(self) -> Iterator:
        return iter(self._m())

    def __len__(self) -> int:
        return len(self._m())

    def __repr__(self) -> str:
        return repr(self._m())


@dataclass(frozen=True, slots=True)
class Plan:
    """What the scheduler decides from one moment (``scenario.md``, "Plan").

    ``order``: priority tier then normal tier. ``dispatch``: the head of the
    order that starts now. ``rounds``: the round of each normal-tier chart.
    ``org_clear_s`` is None and ``org_unplanned`` counts the charts for an org
    whose queued charts are all held, paused or blocked (see :class:`EtaReport`).
    """

    order: list[str]
    dispatch: list[str]
    held: list[str]
    paused: list[str]
    blocked: list[str]
    etas: Mapping[str, Eta]
    org_clear_s: dict[str, float | None]
    clear_s: float
    rounds: Mapping[str, int] = field(default_factory=dict)
    org_unplanned: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OrgRounds:
    """One org's persistent round-robin state (contracts/simulate.md): ``last``, its
    highest assigned round (None: none), ``used``, how many of its charts, queued or
    dispatched, hold ``last``, and ``in_head``, how many it dispatched in round
    ``head``, or in round ``in_round`` when that is set: under backfill an org may have
    dispatched from a round above ``head`` (a chart started ahead of its round), and a
    re-rank counts from there. ``weight`` is the weight these were computed under: an
    org whose weight changed while no scheduler ran is re-ranked on restore, as a live
    change would."""

    last: int | None
    used: float  # charts (share "charts"), budget-seconds (share "work")
    in_head: float
    weight: int
    in_round: int | None = None  # the round ``in_head`` counts in, when above ``head``


@dataclass(frozen=True, slots=True)
class RoundState:
    """What a restarted scheduler needs, beside each queued chart's own ``round``,
    to resume the fair order exactly (:meth:`FairQueue.export_rounds` /
    :meth:`FairQueue.restore`). ``budget`` is the budget it was computed under.
    ``holds``: under backfill, the guards' windows of the charts started ahead (start,
    estimated end, bound's end, cost; epoch seconds), which the next dispatches keep
    clear (docs/scheduling.md, "Backfill")."""

    head: int
    budget: int
    orgs: Mapping[str, OrgRounds] = field(default_factory=dict)
    share: tuple = (Share.CHARTS, None)  # (share, quantum_s) the rounds were given under
    holds: tuple = ()
