"""The scheduler's notification intake: each message on the channel is parsed once, here
(:func:`read_note`, called by the notification source), into a typed note of
:mod:`common.notify`; :class:`Reads` then says what a batch of notes asks the live loop to
re-read. Pure, no I/O: the loop reads the rows and tables named (the row is the truth)."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.notify import ChartNote, ChartsNote, CostNote, Note, OrgNote, Resync, SettingsNote, from_wire

log = logging.getLogger("fairsched.engine")


def read_note(data: bytes | str) -> Note:
    """The note a channel message carries; :class:`~common.notify.Resync` for one this
    version cannot read (not JSON, an unknown kind, a field missing, unknown or of the wrong
    type): whatever it named is read by the resync."""
    try:
        return from_wire(json.loads(data))
    except (TypeError, ValueError, RecursionError) as exc:  # MalformedNote is a ValueError
        log.warning("notification not understood (%s); resyncing instead: %r", exc, data[:200])
        return Resync()


@dataclass
class Reads:
    charts: set[int] = field(default_factory=set)
    orgs: set[int] = field(default_factory=set)
    costs: bool = False
    settings: bool = False
    resync: bool = False  # a note this version did not understand, or a batch that named only some charts

    @classmethod
    def of(cls, notes: Iterable[Note]) -> "Reads":
        reads = cls()
        for note in notes:
            reads.add(note)
        return reads

    def add(self, note: Note) -> None:
        match note:
            case ChartNote(id=pk):
                self.charts.add(pk)
            case ChartsNote():
                self.charts.update(note.ids)
                self.resync |= not note.complete
            case OrgNote(id=pk):
                self.orgs.add(pk)
            case CostNote():
                self.costs = True
            case SettingsNote():
                self.settings = True
            case _:  # Resync, what the intake made of a note it could not read
                self.resync = True

