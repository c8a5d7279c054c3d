"""Values of the scheduling core, named in the words of docs/scheduling.md.

Every time is a float in seconds: absolute times (``created_at``, ``started_at``,
``now``) are epoch seconds chosen by the caller; ETAs are seconds from ``now``.
The core never reads a clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Callable, Iterator, Mapping, NamedTuple

Pair = tuple  # (org, workflow): workflow may be None


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class RunningChart:
    """A chart in flight, holding ``cost`` of the budget (the cost it was dispatched with)."""

    id: str
    org: str
    workflow: str | None
    started_at: float
    cost: int


class Eta(NamedTuple):
    """When a chart starts and finishes, in seconds from ``now``.

    A named tuple rather than a dataclass: the ETA pass makes one per chart of
    the whole backlog, and tuple construction is several times cheaper.
    """

    start_s: float
    finish_s: float


@dataclass(frozen=True, slots=True)
class Durations:
    """Duration estimates: the average of (org, workflow), else the org's
    average (key ``(org, None)``), else ``default_avg_s``. Callable as
    ``durations(org, workflow) -> seconds``."""

    averages: Mapping[tuple[str, str | None], float] = field(default_factory=dict)
    default_avg_s: float = 600.0

    def __call__(self, org: str, workflow: str | None) -> float:
        a = self.averages
        v = a.get((org, workflow))
        if v is None:
            v = a.get((org, None))
            if v is None:
                return self.default_avg_s
        return v


Estimate = Callable[[str, "str | None"], float]


@dataclass(frozen=True, slots=True)
class EtaReport:
    """Result of an ETA pass (the lane simulation).

    ``etas`` holds every running and every ordered chart; ``org_clear_s`` every
    org with a chart in ``etas`` (callers add zeros for the others);
    ``clear_s`` is the latest finish, 0 if none.
    """

    etas: dict[str, Eta]
    org_clear_s: dict[str, float]
    clear_s: float


class ById(Mapping):
    """A read-only ``id -> value`` mapping over ids held in a list, its lookup
    index built on first lookup.

    A plan of a large backlog produces its values as lists aligned with the
    order; hashing a million ids into a dict is a large share of the plan's
    time and many callers only walk the order (the JSON writer, the snapshot).
    ``head`` holds a few entries given up front (the running charts' ETAs);
    ``value(i)`` is the value of ``ids[i]``, ``values()`` all of them in order.
    Equal to any mapping with the same items.
    """

    __slots__ = ("_head", "_ids", "_value", "_values", "_index")

    def __init__(self, head: dict, ids: list, value: Callable[[int], object], values: Callable[[], Iterator]):
        self._head, self._ids, self._value, self._values = head, ids, value, values
        self._index: dict | None = None

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


@dataclass(frozen=True, slots=True)
class Plan:
    """What the scheduler decides from one moment (``scenario.md``, "Plan").

    ``order``: priority tier then normal tier. ``dispatch``: the head of the
    order that starts now. ``rounds``: the round of each normal-tier chart.
    """

    order: list[str]
    dispatch: list[str]
    held: list[str]
    paused: list[str]
    blocked: list[str]
    etas: Mapping[str, Eta]
    org_clear_s: dict[str, float]
    clear_s: float
    rounds: Mapping[str, int] = field(default_factory=dict)
