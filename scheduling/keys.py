"""Every ordering key of the scheduler, in one place.

The live order (:class:`FairQueue`) builds its keys from these
(:func:`queue_key` around :func:`priority_key`, :func:`normal_key` or
:func:`fifo_key`); the static plan sorts its priority tier by
:func:`priority_key`, ranks charts inside an org by :func:`org_rank_key`, and
orders its normal tier by :func:`normal_key`'s (round, created_at, arrival) with a
bucket pass instead of a comparison sort. The rules that are not keys
(classify, the head-of-line stop, the lane walk, auto-hold) are in
:mod:`scheduling.rules`.

Smaller sorts first everywhere. Tie-breaks are numbered in the order they apply.
``seq`` is the arrival number; the chart id is a last resort that only a
caller giving two charts the same ``seq`` ever reaches.
"""
from __future__ import annotations

from typing import Any, NamedTuple

TIER_PRIORITY = 0
TIER_NORMAL = 1


def priority_key(created_at: float, seq: int, prioritized_at: float | None) -> tuple:
    """Priority tier, FIFO.

    # 1: prioritized_at (missing: created_at)  # 2: created_at  # 3: arrival
    """
    return (created_at if prioritized_at is None else prioritized_at, created_at, seq)


def normal_key(round_: int, created_at: float, seq: int) -> tuple:
    """Normal tier, weighted round-robin.

    # 1: round  # 2: created_at  # 3: arrival
    """
    return (round_, created_at, seq)


def org_rank_key(created_at: float, seq: int, front_at: float | None) -> tuple:
    """Rank of a chart inside its own org, which decides its round (rank // weight).

    # 1: moved to front (charts with ``front_at`` first)
    # 2: most recent ``front_at`` first (among moved charts)
    # 3: created_at  # 4: arrival
    """
    if front_at is None:
        return (1, 0.0, created_at, seq)
    return (0, -front_at, created_at, seq)


def fifo_key(created_at: float, seq: int) -> tuple:
    """Baseline ``fifo``: one queue in arrival order.

    # 1: created_at (a trace's ``at_s``)  # 2: arrival
    """
    return (created_at, seq)


class QueueKey(NamedTuple):
    """Key of a chart in the live order (:class:`FairQueue`): a flat tuple, compared as one
    (a NamedTuple is a tuple: same ordering, same speed; the names are for the reader).

    # 1: ``tier`` (priority before normal)
    # 2-4: ``lead``, ``created_at``, ``seq``: priority tier: :func:`priority_key` (``lead``
    #      is prioritized_at); normal tier: :func:`normal_key` (``lead`` is the round); fifo
    #      baseline: ``(0, *fifo_key)`` (one round)
    # 5: ``id``, the chart id (only if a caller repeats a seq)
    The trailing ``entry`` (the queue's record of the chart) and ``pair`` ((org, workflow))
    are payload; the id is unique so they are never compared.
    """

    tier: int
    lead: Any
    created_at: float
    seq: int
    id: str
    entry: Any
    pair: tuple


_new_key = tuple.__new__


def queue_key(tier: int, key: tuple, chart_id: str, entry, pair) -> QueueKey:
    """The :class:`QueueKey` ``(tier, *key, chart_id, entry, pair)``."""
    k1, k2, k3 = key  # unpacked: cheaper than (tier, *key, ...) for a million keys
    return _new_key(QueueKey, (tier, k1, k2, k3, chart_id, entry, pair))
