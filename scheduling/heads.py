"""The head of a backlog, what a restart or a first start loads before the rest
(:meth:`FairQueue.restore` with a horizon, :meth:`FairQueue.first_head`)."""
from __future__ import annotations

from typing import Iterable

from .keys import normal_key
from .types import QueuedChart, RoundState


def head_of_backlog(queued: Iterable[QueuedChart], k: int
                    ) -> tuple[list[QueuedChart], tuple | None, set[str]]:
    """The head of a saved order, what a restart loads first (:meth:`FairQueue.restore`
    with a horizon): every priority chart, every chart moved to the front without a round,
    of each org the ``k`` first charts with a round by ``(round, created_at, seq)`` (the
    normal key) and its ``k`` first others without a round by ``(created_at, seq)`` (their
    rank order after the moved ones, which is the order they take rounds in).

    With them, the horizon: the smallest normal key of an org's ``k``-th chart with a round
    (its later charts may sort after it), None if no org had ``k``; and the orgs with more
    than ``k`` charts without a round (``truncated``: a restart in the middle of a first
    start's backfill, or after a large import while no scheduler ran), whose unread charts
    take rounds after the read ones (:meth:`FairQueue.restore` bounds the horizon by them).
    The head is the whole backlog when the horizon is None and nothing is truncated. The
    database reads the same rows with a few indexed queries per org
    (``fairsched.engine.store.db.read_head``)."""
    head: list[QueuedChart] = []
    ranked: dict[str, list[QueuedChart]] = {}
    roundless: dict[str, list[QueuedChart]] = {}
    for c in queued:
        if c.priority or (c.round is None and c.front_at is not None):
            head.append(c)
        else:
            (ranked if c.round is not None else roundless).setdefault(c.org, []).append(c)
    bounds = []
    for charts in ranked.values():
        charts.sort(key=lambda c: (c.round, c.created_at, c.seq))
        head.extend(charts[:k])
        if len(charts) >= k:
            c = charts[k - 1]
            bounds.append(normal_key(c.round, c.created_at, c.seq))
    return head, min(bounds) if bounds else None, _first_of_each(roundless, k, head)


def first_head_of_backlog(queued: Iterable[QueuedChart], k: int) -> tuple[list[QueuedChart], set[str]]:
    """A first start's head (no round saved), what :meth:`FairQueue.first_head` takes:
    every priority chart, every chart moved to the front, and of each org its ``k`` first
    others by ``(created_at, seq)``; with them, the orgs that have more. Together the
    first charts of each org's rank order (``org_rank_key``). The database reads the same
    rows with a few indexed queries per org (``fairsched.engine.store.db.read_head``)."""
    head: list[QueuedChart] = []
    rest: dict[str, list[QueuedChart]] = {}
    for c in queued:
        if c.priority or c.front_at is not None:
            head.append(c)
        else:
            rest.setdefault(c.org, []).append(c)
    return head, _first_of_each(rest, k, head)


def _first_of_each(by_org: dict[str, list[QueuedChart]], k: int, head: list[QueuedChart]) -> set[str]:
    """Each org's ``k`` first charts of ``by_org`` by ``(created_at, seq)`` (its rank order
    without a round, the moved ones apart) added to ``head``; returns the orgs that have more."""
    truncated = set()
    for org, charts in by_org.items():
        charts.sort(key=lambda c: (c.created_at, c.seq))
        head.extend(charts[:k])
        if len(charts) > k:
            truncated.add(org)
    return truncated


def same_rounds(whole: RoundState, head: RoundState, truncated: frozenset[str] | set[str]) -> bool:
    """The whole backlog's round state, after it replayed what a partial head did, is the
    head's, but for the cursors of the orgs the head held only the first charts of
    (``truncated``): the whole placed their unread ones after them."""
    if whole == head:
        return True
    if not truncated or (whole.head, whole.budget, whole.orgs.keys()) != (head.head, head.budget, head.orgs.keys()):
        return False
    return all(w == h if org not in truncated else (w.in_head, w.in_round, w.weight) == (h.in_head, h.in_round, h.weight)
               for org, w, h in ((o, whole.orgs[o], head.orgs[o]) for o in whole.orgs))


class NeedsWholeBacklog(Exception):
    """The head of the order cannot be restored alone (:meth:`FairQueue.restore`)."""
