"""Values of the scheduling core, named in the write-up's words.

Every time is a float in seconds: absolute times (``created_at``, ``started_at``,
``now``) are epoch seconds chosen by the caller; ETAs are seconds from ``now``.
The core never reads a clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple

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
    etas: dict[str, Eta]
    org_clear_s: dict[str, float]
    clear_s: float
    rounds: dict[str, int] = field(default_factory=dict)
