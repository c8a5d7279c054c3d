"""A whole read of the charts table as columns, not a :class:`ChartRow` per chart.

A start-up or full-resync read holds every queued and running chart at once: a million at
the scale this is built for. As a list of :class:`ChartRow` (192 bytes each, and a float or
an int per time and number) those rows live in the interpreter's small-object pools
between the objects the state keeps (each chart's id, creation time, external id). Once
the rows are freed, their pools are empty, but the arenas around them are not, so the
process keeps them: 187 MB of holes at a million charts (``bench/memory.py``), every one
of them in the scheduler's RSS and in its forked ETA pass's pages.

:class:`ChartColumns` holds the same read as one array (or list) per field: numbers
unboxed, a missing time or number as NaN or a sentinel, the strings the driver made (the
workflow and state names shared, see :func:`fairsched.engine.store.db._row`), but the external
ids, a string of each chart's own: those as bytes (:class:`StrColumn`). It is a
``Sequence[ChartRow]``: a reader that iterates it gets each row made on demand and freed
before the next, so any reader of a list of rows reads it unchanged, and a reader that
selects (``where``) copies columns, not rows.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, repeat
from operator import attrgetter
from typing import overload

from scheduling import QueuedChart
from fairsched.engine.store.rows import ChartRow, _org_key

NAN = float("nan")
NO_INT = -(2**63)  # a missing integer (a chart without a round or a dispatched cost)

# Each ChartRow field, in its order, and how its column stores it: "q" an integer, "Q" an
# integer or None, "d" a float, "D" a float or None, "b" a bool, "o" any object, "s" a
# string or None as bytes (:class:`StrColumn`: a string of each row's own, the external id).
KINDS: dict[str, str] = {
    "id": "q", "org": "q", "workflow": "o", "state": "o", "created_at": "d", "priority": "b",
    "prioritized_at": "D", "paused": "b", "front_at": "D", "cancel_requested": "b",
    "external_id": "s", "started_at": "D", "dispatched_cost": "Q", "run_id": "o", "round": "Q",
    "due_at": "D", "due_explicit": "b", "due_alert": "o", "est_s": "D", "share": "D",
}
assert tuple(KINDS) == ChartRow.__slots__, "ChartColumns.KINDS must list ChartRow's fields in order"


class StrColumn(Sequence):
    """A column of strings or None, held as their UTF-8 bytes one after another and each
    one's end (the driver's strings die with the batch that brought them, rather than
    live between the objects the state keeps and leave their pools empty once freed: 57 MB
    of holes at a million external ids, ``bench/memory.py``). Each string made when read."""

    __slots__ = ("blob", "ends")

    def __init__(self, values: Iterable[str | None] = ()) -> None:
        self.blob = bytearray()
        self.ends = array("q")  # each row's end in ``blob``; negated (-end - 1): None
        self.extend(values)

    def extend(self, values: Iterable[str | None]) -> None:
        blob, ends = self.blob, self.ends
        for v in values:
            if v is None:
                ends.append(-len(blob) - 1)
            else:
                blob += v.encode()
                ends.append(len(blob))

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self.ends))[i]  # an IndexError as a list's; negative from the end
        end = self.ends[i]
        if end < 0:
            return None
        prev = self.ends[i - 1] if i else 0
        return self.blob[(prev if prev >= 0 else -prev - 1):end].decode()

    def __iter__(self) -> Iterator[str | None]:
        blob, start = self.blob, 0
        for end in self.ends:
            if end < 0:
                start = -end - 1
                yield None
            else:
                yield blob[start:end].decode()
                start = end


def _empty(kind: str):
    if kind == "s":
        return StrColumn()
    if kind in "qQ":
        return array("q")
    if kind in "dD":
        return array("d")
    return bytearray() if kind == "b" else []


def _stored(kind: str, values: Iterable):
    """``values`` as a column of ``kind`` stores them (None as NaN or :data:`NO_INT`)."""
    if kind == "D":
        return [NAN if v is None else v for v in values]
    if kind == "Q":
        return [NO_INT if v is None else v for v in values]
    return values


def _float_or_none(v: float) -> float | None:
    return None if v != v else v


def _int_or_none(v: int) -> int | None:
    return None if v == NO_INT else v


_READ = {"D": _float_or_none, "Q": _int_or_none, "b": bool}


class ChartColumns(Sequence[ChartRow]):
    """Chart rows as columns, one attribute per :class:`ChartRow` field (its name), in the
    order they were added. ``columns[i]`` and iteration make the rows on demand."""

    __slots__ = tuple(KINDS)

    def __init__(self) -> None:
        for name, kind in KINDS.items():
            setattr(self, name, _empty(kind))

    @classmethod
    def of(cls, rows: Iterable[ChartRow]) -> "ChartColumns":
        """``rows`` as columns (itself if it already is)."""
        if isinstance(rows, ChartColumns):
            return rows
        out = cls()
        out.extend(rows if isinstance(rows, list) else list(rows))
        return out

    def extend(self, rows: Sequence[ChartRow]) -> None:
        """Add ``rows`` (a batch: each column takes them in one pass)."""
        for name, kind in KINDS.items():
            getattr(self, name).extend(_stored(kind, map(attrgetter(name), rows)))

    def where(self, mask: Iterable) -> "ChartColumns":
        """The rows whose ``mask`` entry is true, as new columns (itself if every entry is)."""
        mask = mask if isinstance(mask, (bytes, bytearray)) else bytearray(map(bool, mask))
        if mask.count(0) == 0:
            return self
        places = array("q", compress(range(len(mask)), mask))
        out = ChartColumns.__new__(ChartColumns)
        for name, kind in KINDS.items():
            col = getattr(self, name)
            kept = map(col.__getitem__, places)
            setattr(out, name, array(col.typecode, kept) if isinstance(col, array)
                    else bytearray(kept) if kind == "b" else StrColumn(kept) if kind == "s" else list(kept))
        return out

    def queued_charts(self, with_round: bool = False, work: bool = True) -> Iterator[QueuedChart]:
        """:meth:`ChartRow.queued_chart` of each row, made from the columns without the row
        (at a load of a million charts, making the rows first cost 1.5 s more). Each chart's
        ``seq`` is the int its ``id`` string was made from."""
        n = len(self)
        ids = list(self.id)  # the ints: ``seq`` and the id's string made from the same one
        base = (map(str, ids), map(_org_key, self.org), self.workflow, self.created_at, ids,
                map(bool, self.priority), map(_float_or_none, self.prioritized_at), map(bool, self.paused),
                map(_float_or_none, self.front_at))
        if not with_round:
            return map(QueuedChart, *base)
        rounds = list(map(_int_or_none, self.round))
        shares = (map(_float_or_none, self.share) if work else repeat(None, n))
        return map(QueuedChart, *base, rounds, map(_float_or_none, self.est_s),
                   (s if r is not None else None for s, r in zip(shares, rounds)))

    def ids_with_round(self, state: str) -> set[str]:
        """The ids (as the queue's strings) of the rows in ``state`` that hold a saved
        round: a load's "had a round" question, read off two columns, no row made."""
        return {str(i) for i, r, s in zip(self.id, self.round, self.state) if r != NO_INT and s == state}

    def __len__(self) -> int:
        return len(self.id)

    @overload
    def __getitem__(self, i: int) -> ChartRow: ...
    @overload
    def __getitem__(self, i: slice) -> list[ChartRow]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return ChartRow(*(_READ.get(kind, _same)(getattr(self, name)[i]) for name, kind in KINDS.items()))

    def __iter__(self) -> Iterator[ChartRow]:
        """Each row made as it is read: the previous one is freed by then unless the reader
        keeps it."""
        return map(ChartRow, *(map(_READ[kind], getattr(self, name)) if kind in _READ else getattr(self, name)
                               for name, kind in KINDS.items()))

    def __repr__(self) -> str:
        return f"<ChartColumns of {len(self)} charts>"


def _same(v):
    return v
