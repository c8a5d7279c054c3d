"""The head of a backlog, what a restart or a first start loads before the rest
(:meth:`FairQueue.restore` with a horizon, :meth:`FairQueue.first_head`)."""
from __future__ import annotations

from typing import Iterable

from .keys import normal_key
from .types import QueuedChart


def head_of_backlog(queued: Iterable[QueuedChart], k: int) -> tuple[list[QueuedChart], tuple | None]:
    """The head of a saved order, what a restart loads first: every priority chart, every
    chart without a round, and of each org the ``k`` first charts with a round by
    ``(round, created_at, seq)`` (the normal key). With them, the horizon: the smallest
    normal key of an org's ``k``-th chart (its later charts may sort after it), None if
    no org had ``k`` (the head is the whole backlog). The database reads the same rows
    with one indexed query per org (``fairsched.engine.db.read_head``)."""
    head: list[QueuedChart] = []
    ranked: dict[str, list[QueuedChart]] = {}
    for c in queued:
        if c.priority or c.round is None:
            head.append(c)
        else:
            ranked.setdefault(c.org, []).append(c)
    bounds = []
    for charts in ranked.values():
        charts.sort(key=lambda c: (c.round, c.created_at, c.seq))
        head.extend(charts[:k])
        if len(charts) >= k:
            c = charts[k - 1]
            bounds.append(normal_key(c.round, c.created_at, c.seq))
    return head, min(bounds) if bounds else None


def first_head_of_backlog(queued: Iterable[QueuedChart], k: int) -> tuple[list[QueuedChart], set[str]]:
    """A first start's head (no round saved), what :meth:`FairQueue.first_head` takes:
    every priority chart, every chart moved to the front, and of each org its ``k`` first
    others by ``(created_at, seq)``; with them, the orgs that have more. Together the
    first charts of each org's rank order (``org_rank_key``). The database reads the same
    rows with a few indexed queries per org (``fairsched.engine.db.read_head``)."""
    head: list[QueuedChart] = []
    rest: dict[str, list[QueuedChart]] = {}
    for c in queued:
        if c.priority or c.front_at is not None:
            head.append(c)
        else:
            rest.setdefault(c.org, []).append(c)
    truncated = set()
    for org, charts in rest.items():
        charts.sort(key=lambda c: (c.created_at, c.seq))
        head.extend(charts[:k])
        if len(charts) > k:
            truncated.add(org)
    return head, truncated


class NeedsWholeBacklog(Exception):
    """The head of the order cannot be restored alone (:meth:`FairQueue.restore`)."""
