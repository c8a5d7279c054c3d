"""The read-only side of :class:`~scheduling.queue.FairQueue`: its properties and
views of the order (a mixin; the state is the queue's)."""
from __future__ import annotations

from itertools import chain
from typing import Iterator, KeysView

from ..keys import TIER_NORMAL, TIER_PRIORITY, QueueKey, org_rank_key
from ..rules import BLOCKED, HELD, ORDERED, PAUSED
from ..types import Estimate, QueuedChart


class QueueViews:
    """Properties and views of the order, O(1) unless said."""

    # ------------------------------------------------------------- properties
    @property
    def head(self) -> int:
        """The round of the last normal-tier chart dispatched (0 at start)."""
        return self._head

    def round_state(self) -> dict[str, tuple[int, int]]:
        """Per org ``(last, used)``: its highest assigned round and how many of its charts,
        queued *or dispatched*, hold it (simulate.md). With :attr:`head` this is all the
        arrival rule needs, so a reader can place charts that arrived after a publication."""
        return {org: (last, self._used[org]) for org, last in self._last.items()}

    @property
    def budget(self) -> int:
        return self._budget

    @property
    def estimate(self) -> Estimate:
        """The duration estimate the queue was made with (``estimate``): a chart's work
        under the share "work", and what backfill reserves by unless given another."""
        return self._estimate

    @property
    def weights(self) -> dict[str, int]:
        """Copy of the weights, in the orgs' listed order."""
        return dict(self._weights)

    @property
    def pools(self):
        """The capacity pools the queue dispatches by (a :class:`scheduling.pools.Pools`,
        ``default`` the budget), None: the one budget. Never change it: :meth:`set_pools`."""
        return self._pools

    @property
    def costs(self) -> dict:
        """Copy of the (org, workflow) -> cost table."""
        return dict(self._costs)

    def ordered_count(self, org: str) -> int:
        """How many of ``org``'s charts are in the order, O(1)."""
        return self._ordered_n.get(org, 0)

    def cost_of(self, org: str, workflow: str | None) -> int:
        """The current cost of (org, workflow): 1 if not set."""
        return self._costs.get((org, workflow), 1)

    def __len__(self) -> int:
        """Number of queued charts (ordered, held, paused and blocked)."""
        return len(self._entries)

    def __contains__(self, chart_id: str) -> bool:
        return chart_id in self._entries

    def queued_ids(self) -> KeysView[str]:
        """The ids of every queued chart (ordered, held, paused and blocked), in no
        particular order: a read-only view, O(1) (do not change the queue while iterating)."""
        return self._entries.keys()

    def get(self, chart_id: str) -> QueuedChart | None:
        """The queued chart (with its current round), None if not queued."""
        e = self._entries.get(chart_id)
        return e.chart() if e else None

    def state_of(self, chart_id: str) -> str | None:
        """``"ordered"``, ``"held"``, ``"paused"``, ``"blocked"`` or None."""
        e = self._entries.get(chart_id)
        return e.state if e else None

    def org_of(self, chart_id: str) -> str | None:
        """The org of a queued chart (None: not queued). O(1), no copy."""
        e = self._entries.get(chart_id)
        return e.org if e is not None else None

    def share_of(self, chart_id: str) -> float | None:
        """A queued chart's part of its org's turn in its round (1 under "charts")."""
        e = self._entries.get(chart_id)
        return e.share if e else None

    def rank_of(self, chart_id: str) -> tuple:
        """A queued chart's rank inside its org (:func:`.keys.org_rank_key`): the order in
        which its org's charts take rounds by the arrival rule."""
        e = self._entries[chart_id]
        return org_rank_key(e.created_at, e.seq, e.front_at)

    def round_of(self, chart_id: str) -> int | None:
        """The round a queued chart holds (None: priority tier, not eligible, fifo, unknown)."""
        e = self._entries.get(chart_id)
        return e.round if e else None

    # ------------------------------------------------------------------ order
    @property
    def order_len(self) -> int:
        """Number of charts in the order."""
        return len(self._order)

    def __iter__(self) -> Iterator[str]:
        """Chart ids of the order, lazily from the head. Do not modify while iterating."""
        return (k.id for k in self._order)

    def order(self) -> list[str]:
        """Snapshot of the order as chart ids, O(n)."""
        return [k.id for k in self._order]

    def walk(self) -> Iterator[tuple[str, tuple, int | None]]:
        """``(chart id, (org, workflow), round)`` of the order from the head, the
        round None in the priority tier: what a forecast pass needs, without
        building a :class:`QueuedChart` per chart."""
        for k in chain.from_iterable(self._order.sublists()):
            yield k.id, k.pair, (k.lead if k.tier == TIER_NORMAL else None)

    def keys(self) -> Iterator[QueueKey]:
        """The order's keys from the head (:class:`~.keys.QueueKey`: ``id``, ``pair`` and
        ``created_at``, the chart's in every tier), for a pass over every chart that reads a
        few fields of each: no :class:`QueuedChart` built per chart, no call per chart. Read
        the key, not its ``entry``: in a forked pass every object read has its reference
        count written, so each entry read is a page the child copies."""
        return chain.from_iterable(self._order.sublists())

    def iter_charts(self) -> Iterator[QueuedChart]:
        """The ordered charts (with their rounds) lazily from the head; slice it
        with ``itertools.islice`` for a dashboard's first page."""
        return (k.entry.chart() for k in self._order)

    def position(self, chart_id: str) -> int | None:
        """0-based position in the order, None if not in it. O(n / 512 + log n)."""
        e = self._entries.get(chart_id)
        if e is None or e.key is None:
            return None
        return self._order.index(e.key)

    def _aside_ids(self, state: str) -> list[str]:
        return [e.id for e in sorted(self._aside[state].values(), key=lambda e: (e.seq, e.id))]

    @property
    def held(self) -> list[str]:
        """Ids of charts of orgs with weight 0, in arrival order."""
        return self._aside_ids(HELD)

    @property
    def paused(self) -> list[str]:
        """Ids of paused charts (of orgs not held), in arrival order."""
        return self._aside_ids(PAUSED)

    @property
    def blocked(self) -> list[str]:
        """Ids of charts whose cost exceeds the whole budget, in arrival order."""
        return self._aside_ids(BLOCKED)

    def backlog(self) -> list[QueuedChart]:
        """Every queued chart in arrival order, each ordered normal-tier chart
        with its current ``round`` (for a dump that replays to the same order)."""
        out = []
        for e in sorted(self._entries.values(), key=lambda e: (e.seq, e.id)):
            c = e.chart()
            if e.state != ORDERED or (e.key is not None and e.key.tier == TIER_PRIORITY) \
                    or self.policy != "wrr":
                if c.round is not None:
                    c = QueuedChart(c.id, c.org, c.workflow, c.created_at, c.seq, c.priority,
                                    c.prioritized_at, c.paused, c.front_at, None)
            out.append(c)
        return out
