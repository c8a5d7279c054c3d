"""How a :class:`~scheduling.queue.FairQueue` resumes from what was saved, whole or
head first (a mixin; the state is the queue's): :meth:`QueueLoads.restore` after a restart
or a failover, :meth:`QueueLoads.first_head` at a first start. A head-first queue is
*partial*: it dispatches up to a horizon and logs what it takes out, for
:meth:`~scheduling.queue.FairQueue.replay` on the whole backlog's queue
(docs/architecture.md, "Start-up: the head of the order first")."""
from __future__ import annotations

import math
from operator import attrgetter
from typing import Iterable, Mapping, Self

from ..heads import NeedsWholeBacklog
from ..keys import TIER_NORMAL, org_rank_key
from ..plan import gc_paused
from ..rules import ORDERED
from ..types import QueuedChart, RoundState

_seq_id = attrgetter("seq", "id")


class QueueLoads:
    """The constructors from a saved state, and what they share."""

    @classmethod
    def restore(
        cls,
        queued: Iterable[QueuedChart],
        *,
        state: RoundState,
        budget: int,
        weights: Mapping[str, int],
        costs: Mapping[tuple[str, str | None], int] | None = None,
        horizon: tuple | None = None,
        truncated: Iterable[str] | None = None,
        **policies,
    ) -> Self:
        """Resume after a restart or a failover from what :meth:`export_rounds` and
        :meth:`take_round_changes` persisted (contracts/simulate.md: the order after a
        restart equals the order before it). Each chart's ``round`` is the round it
        held (None: it arrived after the last save, or never had one). ``head`` and
        each org's ``(last, used, in_head)`` come from ``state``.

        Charts with a round keep it; the others then arrive, per org in its rank
        order, by the arrival rule. An org whose weight differs from ``state``'s is
        re-ranked, and every org (in listed order) if the budget differs: what a live
        change made while no scheduler ran would have done. O(n log n).

        ``horizon``: ``queued`` is only the head of the order, every chart whose normal
        key is at most ``horizon`` (a ``(round, created_at, seq)``), with the whole
        priority tier and every chart without a round but those of ``truncated`` orgs (a
        restart loads that first and the rest meanwhile). The queue dispatches up to the
        horizon only, and logs what it takes out for :meth:`replay` on the whole queue.
        Raises :class:`NeedsWholeBacklog` if any org must be re-ranked (that needs all its
        charts). ``truncated``: orgs of
        which ``queued`` holds only the first charts without a round in rank order
        (:func:`head_of_backlog`); the horizon stops below where their unread ones go."""
        truncated = set(truncated or ())
        if horizon is not None and horizon[0] < state.head:
            raise NeedsWholeBacklog("the head alone may hide charts below the head round")
        partial = horizon is not None or bool(truncated)
        with gc_paused():
            q = cls(budget=budget, weights=weights, costs=costs, track_rounds=True, **policies)
            if truncated and q._work:  # (docs/scheduling.md, "The live scheduler and the policies")
                raise NeedsWholeBacklog("under the share work, an org's unread charts may carry any work")
            q._adopt_rounds(state)
            q._enter(queued, with_round=True)
            if tuple(state.share) != q.share_key:
                q._convert_dispatched(tuple(state.share))
            q._order.bulk_load(q._restored_keys(state, partial))
            if partial:
                q._cut_short(truncated, horizon)
            return q

    def _adopt_rounds(self, state: RoundState) -> None:
        """``head``, the guards' holds and each org's saved round state, as saved."""
        self._head = int(state.head)
        self._guard_holds = [tuple(h) for h in state.holds]
        for org in self._weights:
            s = state.orgs.get(org)
            if s is None:
                continue
            if s.last is not None:
                self._last[org], self._used[org] = s.last, s.used
            if s.in_head:
                r = self._head if s.in_round is None else int(s.in_round)
                self._disp_round[org], self._disp_count[org] = r, s.in_head

    def _restored_keys(self, state: RoundState, partial: bool) -> list[tuple]:
        """Every org's order keys: its saved rounds resumed, or re-ranked where what was
        saved no longer holds (its weight, the budget or the share changed, or it is stale);
        a partial load cannot re-rank (:class:`NeedsWholeBacklog`)."""
        rerank_all = state.budget != self._budget or tuple(state.share) != self.share_key
        keys: list[tuple] = []
        for org, w in self._weights.items():
            s = state.orgs.get(org)
            if rerank_all or (s is not None and s.weight != w) or self._stale(org):
                if partial:
                    raise NeedsWholeBacklog(f"org {org} is re-ranked on restore")
                keys.extend(self._rank(org, insert=False))
            else:
                keys.extend(self._resume_org(org))
        return keys

    @classmethod
    def first_head(
        cls,
        queued: Iterable[QueuedChart],
        *,
        truncated: Iterable[str],
        budget: int,
        weights: Mapping[str, int],
        costs: Mapping[tuple[str, str | None], int] | None = None,
        **policies,
    ) -> Self:
        """A first start's head (no round was ever saved): ``queued`` holds the whole
        priority tier and, of each org, a prefix of its rank order (``org_rank_key``);
        ``truncated``: the orgs with more charts than that. Their ranks are exactly
        :meth:`from_backlog`'s: an org's charts take rounds in its rank order, each by the
        arrival rule from ``head = 0``, so an org's first charts get the same rounds
        whatever follows them.

        What the head cannot know is where a truncated org's unread charts go: from the
        round of its last read chart on (the next round if that one is full). So the
        queue is partial (:attr:`partial`): it dispatches the normal tier only below the
        smallest such round (a truncated org with no ordered chart read: none at all), and
        logs what it takes out for :meth:`replay` on the whole backlog's queue.
        :func:`first_head_of_backlog` says which charts the head holds."""
        q = cls.from_backlog(queued, budget=budget, weights=weights, costs=costs, track_rounds=True, **policies)
        truncated = set(truncated)
        if truncated:  # partial even if only held orgs were cut: the whole backlog must follow
            q._cut_short(truncated, None)
        return q

    def _cut_short(self, truncated: set[str], horizon: tuple | None) -> None:
        """Make the queue partial: it dispatches the normal tier up to ``horizon`` (a normal
        key; None: any) and below the round where each ``truncated`` org's unread charts may
        go (its next chart takes ``last`` again while fewer than its turn hold it, else the
        next round; never below the head), and logs what it takes out for :meth:`replay`."""
        for org in truncated:
            if self._weights.get(org, 0) <= 0:
                continue  # held: none of its charts is ever ordered
            last = self._last.get(org)
            if last is None or last < self._head:
                top = self._head - 1  # its unread charts may take the head round
            else:
                top = last if self._used.get(org, 0) >= self._turn(org) else last - 1
            bound = (top, math.inf, math.inf)  # a round <= top
            horizon = bound if horizon is None else min(horizon, bound)
        self._horizon = (TIER_NORMAL, *(horizon if horizon is not None else (math.inf,)))
        self.start_log = []

    def _stale(self, org: str) -> bool:
        """A restored normal-tier chart of ``org`` in the order below ``head`` cannot be
        what was saved: it was resumed or un-prioritised while no scheduler ran, which
        re-ranks."""
        return any(e.round is not None and e.round < self._head and not e.priority
                   and self._state(e) == ORDERED for e in self._by_org[org].values())

    def _resume_org(self, org: str) -> list[tuple]:
        """:meth:`restore` of one org: its charts with a round keep it (in arrival
        order), then the others arrive in rank order. Returns their keys."""
        charts = self._by_org[org].values()
        kept = sorted((e for e in charts if e.round is not None), key=_seq_id)
        new = sorted((e for e in charts if e.round is None),
                     key=lambda e: org_rank_key(e.created_at, e.seq, e.front_at))
        keys = [self._place(e, arrive=False, insert=False) for e in kept]
        for e in new:
            keys.append(self._place(e, arrive=True, insert=False))
            if e.round is not None:
                self._changed.add(e.id)
        return [k for k in keys if k is not None]
