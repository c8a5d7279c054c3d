"""The published order's rows, held as columns while an ETA pass stores them.

A snapshot's rows (:data:`ROW_KEYS`: a chart's id, place, org, workflow, cost, round,
state, ETA, 90% bound and due state) are made for every queued chart at every pass. Held
as a tuple each, they were a 15-tuple, an int for the place and one for the id, and a
float for the bound: about 270 bytes a chart, 245 MB of the forked pass's 942 MB at a
million charts (``bench/child_memory.py``). Here each field is one column: an ``array``
of machine numbers for the ids, orgs, costs, rounds, times and due states (``NaN`` and
:data:`NO_ROUND` stand for None), a list for the workflows and external ids (the state's
own strings, not copies); a row's place is its index. Rows are made a page at a time,
when read (``common.snapshot`` encodes 500 at a time).

:class:`OrderColumns` holds the order's rows; :class:`Rows` is a view of them as a
sequence of dicts: all of them (the order, then the charts set aside after it, as
tuples) or one org's (its rows' indexes, then its charts set aside and its running
charts, as dicts).
"""
from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import Any

from scheduling.due import AT_RISK, LATE, ON_TIME

ROW_KEYS = ("id", "pos", "org", "workflow", "cost", "round", "priority", "state", "external_id",
            "start_s", "finish_s", "p90_s",  # a row of the order; a chart set aside has no p90_s
            "due_s", "due_state", "slack_s")  # its due time (seconds from now), state and slack; None: no due time

NO_ROUND = -(2 ** 63)  # a row without a round (the priority tier)
NAN = float("nan")
INF = float("inf")
DUE_STATES = (None, ON_TIME, AT_RISK, LATE)  # a row's due state by its code
DUE_CODE = {s: i for i, s in enumerate(DUE_STATES)}
ORDERED = "ordered"
PAGE = 500  # rows made at a time when a whole view is walked


_dumps = json.JSONEncoder(separators=(",", ":")).encode  # as common.snapshot writes its pages
# A row of the order as that writes its dict (ROW_KEYS, compact); each %s is a JSON token
_ROW_JSON = ('{"id":%d,"pos":%d,"org":%d,"workflow":%s,"cost":%d,"round":%s,"priority":%s,"state":"ordered",'
             '"external_id":%s,"start_s":%s,"finish_s":%s,"p90_s":%s,"due_s":%s,"due_state":%s,"slack_s":%s}')
_DUE_JSON = [_dumps(s) for s in DUE_STATES]


def _json_str(v: str | None) -> str:
    return "null" if v is None else encode_basestring_ascii(v)


def _json_floats(col: Sequence[float]) -> list[str]:
    """Each float as ``json`` writes it, NaN (None) as null."""
    out = ["null" if x != x else x.__repr__() for x in col]
    if INF in col or -INF in col:  # (never an ETA; as json writes them)
        out = [_dumps(x) if x in (INF, -INF) else t for x, t in zip(col, out)]
    return out


class LookedUp(Sequence):
    """A column looked up by the row's id when read (``of``: id -> value), not held: the
    external ids of the order (``ExternalIds.get``), a string made per read, so a forked
    pass copies no page of the parent's strings and keeps no list of a million of them."""

    __slots__ = ("ids", "of")

    def __init__(self, ids: Sequence[int], of: Callable[[int], Any]) -> None:
        self.ids, self.of = ids, of

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(map(self.of, self.ids[i]))
        return self.of(self.ids[i])

    def __iter__(self) -> Iterator:
        return map(self.of, self.ids)


class OrderColumns:
    """The order's rows, one column a field (see the module's docstring). Filled by
    :meth:`add`, read by :meth:`rows`, and written as JSON by :meth:`json_rows` and :meth:`json_places`."""

    __slots__ = ("id", "org", "workflow", "cost", "round", "ext", "start", "finish", "p90", "due", "due_state",
                 "slack")

    def __init__(self) -> None:
        self.id, self.org, self.cost, self.round = array("q"), array("q"), array("q"), array("q")
        self.workflow: list[str | None] = []
        self.ext: list[str | None] | LookedUp = []  # (publish: looked up by id, LookedUp)
        self.start, self.finish, self.p90 = array("d"), array("d"), array("d")
        self.due, self.slack = array("d"), array("d")
        self.due_state = bytearray()

    def __len__(self) -> int:
        return len(self.id)

    @staticmethod
    def _take(idx: range | Sequence[int]) -> Callable[[Sequence], Sequence]:
        """A column's values at ``idx`` (a range with step 1, or one index or more)."""
        if type(idx) is range:
            a, b = idx.start, idx.stop
            return lambda col: col[a:b]
        if len(idx) == 1:
            i = idx[0]
            return lambda col: [col[i]]
        return itemgetter(*idx)

    def _cols(self, idx: range | Sequence[int]) -> list[list]:
        """Each column's values at ``idx`` (a range with step 1, or indexes), None restored."""
        if not len(idx):
            return [[] for _ in range(12)]
        take = self._take(idx)
        rnds = [None if r == NO_ROUND else r for r in take(self.round)]
        return [take(self.id), rnds, take(self.org), take(self.workflow), take(self.cost), take(self.ext),
                *([None if x != x else x for x in take(col)]
                  for col in (self.start, self.finish, self.p90, self.due, self.slack)),
                [DUE_STATES[c] for c in take(self.due_state)]]

    def rows(self, idx: range | Sequence[int]) -> list[tuple]:
        """The rows at ``idx`` as tuples of :data:`ROW_KEYS` values."""
        ids, rnds, orgs, wfs, costs, exts, starts, fins, p90s, dues, slacks, states = self._cols(idx)
        return [(i, pos, o, wf, c, r, r is None, ORDERED, x, s, f, p, d, ds, sl)
                for i, pos, o, wf, c, r, x, s, f, p, d, ds, sl
                in zip(ids, idx, orgs, wfs, costs, rnds, exts, starts, fins, p90s, dues, states, slacks)]

    def json_rows(self, idx: range | Sequence[int]) -> list[str]:
        """The rows at ``idx`` as the JSON text of their dicts (compact), written a column at a
        time: no tuple nor dict per row. A snapshot's pages of the order and of each org hold
        every row: made as dicts and encoded, they were a third of a pass's store at 1M."""
        if not len(idx):
            return []
        take = self._take(idx)
        rounds = take(self.round)
        wf_json = {w: _json_str(w) for w in set(take(self.workflow))}
        return list(map(_ROW_JSON.__mod__, zip(
            take(self.id), idx, take(self.org), map(wf_json.__getitem__, take(self.workflow)), take(self.cost),
            ["null" if r == NO_ROUND else r.__repr__() for r in rounds],
            ["true" if r == NO_ROUND else "false" for r in rounds],
            map(_json_str, take(self.ext)),
            *(_json_floats(take(col)) for col in (self.start, self.finish, self.p90, self.due)),
            map(_DUE_JSON.__getitem__, take(self.due_state)), _json_floats(take(self.slack)))))

    def json_places(self, idx: range | Sequence[int]) -> list[tuple[int, str]]:
        """``(id, its place as JSON)`` of each row at ``idx``: ``[pos, state, finish_s, start_s,
        p90_s]``, and ``due_s, due_state, slack_s`` after them when it has a due time (what
        ``common.snapshot`` stores per chart), written a column at a time."""
        if not len(idx):
            return []
        take = self._take(idx)
        fins, starts, p90s, dues, slacks = (_json_floats(take(col))
                                            for col in (self.finish, self.start, self.p90, self.due, self.slack))
        return [(i, '[%d,"ordered",%s,%s,%s]' % (pos, f, s, p) if not code else
                 '[%d,"ordered",%s,%s,%s,%s,%s,%s]' % (pos, f, s, p, d, _DUE_JSON[code], sl))
                for i, pos, f, s, p, d, code, sl in zip(take(self.id), idx, fins, starts, p90s, dues,
                                                        take(self.due_state), slacks)]


class Rows(Sequence):
    """Rows of the published order as a sequence of dicts (see the module's docstring):
    the rows of ``cols`` at ``idx`` (None: all, in order), then ``tail``, tuples of
    :data:`ROW_KEYS` values (the charts set aside) or dicts (running charts). Each row's
    dict is made when read, a page at a time when the whole is walked."""

    __slots__ = ("cols", "idx", "tail")

    def __init__(self, cols: OrderColumns | None = None, idx: Sequence[int] | None = None,
                 tail: list | None = None) -> None:
        self.cols = OrderColumns() if cols is None else cols
        self.idx = idx
        self.tail = [] if tail is None else tail

    def _index(self) -> range | Sequence[int]:
        return range(len(self.cols)) if self.idx is None else self.idx

    def _head_len(self) -> int:
        return len(self.cols) if self.idx is None else len(self.idx)

    def __len__(self) -> int:
        return self._head_len() + len(self.tail)

    def _tuples(self, lo: int, hi: int) -> list:
        """Rows ``lo`` to ``hi`` (clamped), as tuples or, for running charts, dicts."""
        n = self._head_len()
        out: list = []
        if lo < n:
            out = self.cols.rows(self._index()[lo:min(hi, n)])
        if hi > n:
            out.extend(self.tail[max(lo - n, 0):hi - n])
        return out

    def json_page(self, lo: int, hi: int) -> str:
        """The JSON text (compact) of ``self[lo:hi]``, the order's rows written from the columns
        (:meth:`OrderColumns.json_rows`): what ``common.snapshot`` stores as a page."""
        lo, hi, _ = slice(lo, hi).indices(len(self))
        n = self._head_len()
        parts = self.cols.json_rows(self._index()[lo:min(hi, n)]) if lo < n else []
        if hi > n:
            parts += [_dumps(_as_dict(t)) for t in self.tail[max(lo - n, 0):hi - n]]
        return "[" + ",".join(parts) + "]"

    def __getitem__(self, i):
        if isinstance(i, slice):
            lo, hi, step = i.indices(len(self))
            rows = self._tuples(lo, hi) if step == 1 else [self._tuples(k, k + 1)[0] for k in range(lo, hi, step)]
            return [_as_dict(t) for t in rows]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("row index out of range")
        return _as_dict(self._tuples(i, i + 1)[0])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for lo in range(0, len(self), PAGE):
            yield from map(_as_dict, self._tuples(lo, lo + PAGE))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Rows, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"Rows({list(self)!r})"

    def json_places(self) -> Iterator[tuple[int, str]]:
        """``(id, its place as JSON)`` of each row (:meth:`OrderColumns.json_places`; the rows
        of the tail, set aside or running, from their values)."""
        idx = self._index()
        heads = (self.cols.json_places(idx[lo:lo + PAGE]) for lo in range(0, len(idx), PAGE))
        return chain(chain.from_iterable(heads), map(_json_place, self.tail))

    def external_ids(self) -> Iterator[str | None]:
        """The ``external_id`` of each row, without making its dict."""
        ext = self.cols.ext
        heads = iter(ext) if self.idx is None else map(ext.__getitem__, self.idx)
        return chain(heads, (t.get("external_id") if type(t) is dict else t[8] for t in self.tail))


def _as_dict(t) -> dict[str, Any]:
    return t if type(t) is dict else dict(zip(ROW_KEYS, t))


def _json_place(t) -> tuple[int, str]:
    cid, pos, state, finish, start, p90, due, due_state, slack = _place(t)
    return cid, _dumps([pos, state, finish, start, p90] + ([due, due_state, slack] if due_state else []))


def _place(t) -> tuple:
    if type(t) is dict:
        return (t["id"], t.get("pos"), t.get("state"), t.get("finish_s"), t.get("start_s"), t.get("p90_s"),
                t.get("due_s"), t.get("due_state"), t.get("slack_s"))
    return t[0], t[1], t[7], t[10], t[9], t[11], t[12], t[13], t[14]
