"""The scheduler's notifications (:mod:`common.notify`): every kind survives the wire (the
sender's ``to_wire`` and JSON, the intake's ``read_note``), and a note the intake cannot
read -- an unknown kind, a field missing, unknown or of the wrong type, not JSON -- reads
as a resync."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common import notify
from common.notify import (CHARTS_NAMED, NOTES, ChartNote, ChartsNote, CostNote, Kind, MalformedNote, OrgNote,
                           Resync, SettingsNote, UnknownKind, from_wire)
from fairsched.engine.notes import Reads, read_note

ids = st.integers(min_value=1, max_value=2**53)
any_note = st.one_of(
    st.builds(ChartNote, id=ids),
    st.builds(ChartsNote.of, st.lists(ids, max_size=CHARTS_NAMED + 5)),
    st.builds(OrgNote, id=ids),
    st.builds(CostNote, org=ids, workflow=ids),
    st.just(SettingsNote()),
    st.just(Resync()),
)
EXAMPLES = [ChartNote(id=12), ChartsNote.of([1, 2, 3]), OrgNote(id=3), CostNote(org=3, workflow=2), SettingsNote(),
            Resync()]


def test_every_kind_has_an_example_here():
    assert {type(n) for n in EXAMPLES} == set(NOTES.values()) and {n.kind for n in EXAMPLES} == set(Kind)


@given(any_note)
def test_every_note_survives_the_wire(note):
    data = json.dumps(note.to_wire()).encode()
    assert read_note(data) == note == from_wire(json.loads(data))


@pytest.mark.parametrize("note", EXAMPLES, ids=[n.kind.value for n in EXAMPLES])
def test_the_wire_form_is_the_documented_json(note):
    expected = {
        Kind.CHART: {"kind": "chart", "id": 12}, Kind.CHARTS: {"kind": "charts", "ids": [1, 2, 3], "count": 3},
        Kind.ORG: {"kind": "org", "id": 3}, Kind.COST: {"kind": "cost", "org": 3, "workflow": 2},
        Kind.SETTINGS: {"kind": "settings"}, Kind.RESYNC: {"kind": "resync"},
    }[note.kind]
    assert note.to_wire() == expected
    assert notify.__doc__ and f"\n{note.kind.value} " in notify.__doc__  # the docstring's table names it


def test_a_bulk_note_names_the_first_thousand_and_counts_all():
    note = ChartsNote.of(list(range(1, CHARTS_NAMED + 11)))
    assert len(note.ids) == CHARTS_NAMED and note.count == CHARTS_NAMED + 10 and not note.complete
    reads = Reads.of([read_note(json.dumps(note.to_wire()))])
    assert reads.resync and len(reads.charts) == CHARTS_NAMED


@pytest.mark.parametrize("data", [
    b'{"kind": "what"}', b'{"kind": null}', b"{}", b'{"id": 3}',
    b'{"kind": "chart"}', b'{"kind": "chart", "id": "5"}', b'{"kind": "chart", "id": true}',
    b'{"kind": "chart", "id": 5, "org": 1}', b'{"kind": "charts", "ids": [1, "x"], "count": 2}',
    b'{"kind": "charts", "ids": 7, "count": 1}', b'{"kind": "charts", "ids": [1, 2], "count": 1}',
    b'{"kind": "cost", "org": 1}', b'{"kind": "settings", "budget": 3}',
    b"[1, 2]", b'"chart"', b"not json", b"\xff\xfe", b"",
], ids=lambda d: d.decode(errors="replace") or "empty")
def test_a_note_the_intake_cannot_read_is_a_resync(data, caplog):
    note = read_note(data)
    assert note == Resync() and Reads.of([note]).resync
    assert "notification not understood" in caplog.text


def test_from_wire_says_what_is_wrong():
    with pytest.raises(UnknownKind, match="unknown note kind 'what'"):
        from_wire({"kind": "what"})
    with pytest.raises(MalformedNote, match="chart note: id must be a whole number, got '5'"):
        from_wire({"kind": "chart", "id": "5"})
    with pytest.raises(MalformedNote, match="cost note: .*workflow"):
        from_wire({"kind": "cost", "org": 1})


def test_a_sender_cannot_make_a_bad_note_or_send_a_dict():
    with pytest.raises(MalformedNote):
        ChartNote(id="12")
    with pytest.raises(TypeError, match="takes a common.notify.Note"):
        notify.notify({"kind": "chart", "id": 12})
