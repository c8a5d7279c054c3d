"""What a batch of scheduler notifications (:mod:`common.notify`) asks the live loop
to re-read: pure, no I/O. The loop reads the rows and tables named (the row is the truth)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Reads:
    charts: set[int] = field(default_factory=set)
    orgs: set[int] = field(default_factory=set)
    costs: bool = False
    settings: bool = False
    resync: bool = False  # a note this version does not know, or a batch that named only some charts

    @classmethod
    def of(cls, notes: list[dict]) -> "Reads":
        reads = cls()
        for note in notes:
            reads.add(note)
        return reads

    def add(self, note: dict) -> None:
        kind = note.get("kind")
        if kind == "chart" and isinstance(note.get("id"), int):
            self.charts.add(note["id"])
        elif kind == "charts":
            got = [i for i in note.get("ids", []) if isinstance(i, int)]
            self.charts.update(got)
            if note.get("count", len(got)) > len(got):
                self.resync = True
        elif kind == "org" and isinstance(note.get("id"), int):
            self.orgs.add(note["id"])
        elif kind == "cost":
            self.costs = True
        elif kind == "settings":
            self.settings = True
        else:  # "resync", or anything this version does not know
            self.resync = True
