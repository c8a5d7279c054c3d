"""Dispatch from :class:`~fairsched.core.queue.FairQueue` (a mixin; the state is the
queue's): the head-of-line walk, a partial queue's horizon, and the replay of what it took."""
from __future__ import annotations

from itertools import chain, islice, takewhile
from operator import attrgetter, itemgetter
from typing import Iterable, Iterator

from .entry import _Entry
from .keys import TIER_NORMAL, TIER_PRIORITY, QueueKey
from .rules import head_of_line
from .types import QueuedChart

_payload = itemgetter(QueueKey._fields.index("entry"))  # C speed, by the field's position
_ecost = attrgetter("cost")


def _costs_in_order(sublists: list[list[tuple]], free: int) -> Iterator[int]:
    """The cost of each chart of the order (its keys' ``sublists``), lazily from the
    head, for the head-of-line stop within ``free``. Every cost is at least 1, so at
    most ``free`` charts start: when the first sublist is longer, it holds the stop."""
    if sublists and free < len(sublists[0]):
        return map(_ecost, map(_payload, sublists[0]))
    return map(_ecost, map(_payload, chain.from_iterable(sublists)))


class QueueDispatch:
    """Starting charts from the head of the order."""

    # --------------------------------------------------------------- dispatch
    def _startable(self, free: int) -> int:
        """How many charts at the head start within ``free``: the head-of-line walk, and
        in a partial queue (:meth:`restore` with a horizon) none past the horizon."""
        n = head_of_line(_costs_in_order(self._order.sublists(), free), free)
        if self._horizon is not None and n:
            h = self._horizon
            n = sum(1 for _ in takewhile(lambda k: k[:4] <= h, islice(self._order, n)))
        return n

    @property
    def partial(self) -> bool:
        """True for the head of the order restored alone (:meth:`restore` with a horizon)."""
        return self._horizon is not None

    def close_horizon(self, everything: bool = False) -> None:
        """Dispatch nothing more of the normal tier (``everything``: nothing at all):
        something changed that the head alone cannot place."""
        if self._horizon is not None:
            self._horizon = (TIER_PRIORITY - 0.5,) if everything else (TIER_NORMAL - 0.5,)

    def peek(self, free: int) -> list[str]:
        """Ids that :meth:`dispatch` would start with ``free`` budget, without starting them."""
        return [k.id for k in islice(self._order, self._startable(free))]

    def dispatch(self, free: int) -> list[QueuedChart]:
        """Head-of-line walk within ``free`` (may be negative): start each chart
        at the head that fits, stop at the first that does not. The started
        charts leave the queue; each normal-tier one sets ``head`` to its round.
        Their cost is ``cost_of(chart.org, chart.workflow)`` (read it now: a
        later ``set_cost`` does not touch in-flight work)."""
        started = []
        log = self.start_log
        for k in self._order.pop_head(self._startable(free)):
            e = k.entry
            self._ordered_n[e.org] -= 1
            self._forget(e)
            e.key = None
            e.state = ""
            normal = k.tier == TIER_NORMAL
            self._dispatched(e.org, normal, e.round)
            if log is not None:
                log.append(("dispatch", e.id, normal, e.round))
            started.append(e.chart())
        return started

    def _forget(self, e: _Entry) -> None:
        del self._entries[e.id]
        del self._by_org[e.org][e.id]
        self._changed.discard(e.id)
        if self.gone_log is not None:
            self.gone_log.append((e.org, e.round))

    def _touched(self, e: _Entry) -> None:
        if self.touched_log is not None:
            self.touched_log.append((e.org, e.round))

    def _dispatched(self, org: str, normal: bool, r: int | None) -> None:
        """A chart of ``org`` holding round ``r`` was dispatched: a normal-tier one sets
        ``head`` to its round (and keeps counting for it)."""
        if not normal or r is None:
            return
        self._head = r
        if self._disp_round.get(org) == r:
            self._disp_count[org] += 1
        else:
            self._disp_round[org] = r
            self._disp_count[org] = 1

    def replay(self, log: Iterable[tuple]) -> list[tuple[str, str]]:
        """Take out what a partial queue (the head of this order, restored from the same
        saved state) dispatched and removed, as it did: ``head`` and the rounds move
        exactly as they moved there. A chart this queue does not hold arrived after its
        read: a priority chart (no round to count) or one already gone. Returns the
        ``(id, org)`` of each chart taken out."""
        out = []
        for kind, cid, *rest in log:
            e = self._entries.get(cid)
            if kind == "remove":
                if self.remove(cid) is not None:
                    out.append((cid, e.org))
                continue
            if e is None:
                continue
            normal, r = rest
            self._take_out(e)
            self._forget(e)
            self._dispatched(e.org, normal, r)
            out.append((cid, e.org))
        return out
