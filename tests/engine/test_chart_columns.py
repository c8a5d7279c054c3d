"""A read of the charts table held as columns (fairsched.engine.store.chart_columns) reads as the
rows it stands for, and a state loaded from it is the state loaded from the rows, keeping
one copy of each chart's id."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings, strategies as st

from fairsched.engine.store import db
from fairsched.engine.store.chart_columns import ChartColumns, StrColumn
from fairsched.engine.store.external_ids import ExternalIds
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from fairsched.engine.state import LiveState

maybe_t = st.one_of(st.none(), st.floats(0, 2e9, allow_nan=False))
maybe_n = st.one_of(st.none(), st.integers(0, 2 ** 40))
row = st.builds(
    ChartRow, st.integers(1, 2 ** 40), st.integers(1, 4), st.sampled_from(["review", "code"]),
    st.sampled_from(["queued", "running"]), st.floats(0, 2e9, allow_nan=False), st.booleans(), maybe_t,
    st.booleans(), maybe_t, st.booleans(), st.one_of(st.none(), st.text(max_size=5)), maybe_t, maybe_n,
    st.sampled_from(["", "run-1"]), maybe_n, maybe_t, st.booleans(), st.sampled_from(["", "at_risk", "late"]),
    maybe_t, maybe_t)


@settings(max_examples=200, deadline=None)
@given(st.lists(row, max_size=30), st.data())
def test_the_columns_read_as_the_rows(rows, data):
    cols = ChartColumns()
    cut = data.draw(st.integers(0, len(rows)))
    cols.extend(rows[:cut])
    cols.extend(rows[cut:])  # batches, as the database read adds them
    assert len(cols) == len(rows)
    assert list(cols) == rows
    assert [cols[i] for i in range(len(rows))] == rows
    assert cols[1:-1] == rows[1:-1]
    if rows:
        assert cols[-1] == rows[-1]
    mask = data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    assert list(cols.where(mask)) == [r for r, m in zip(rows, mask) if m]
    assert list(ChartColumns.of(rows)) == rows and ChartColumns.of(cols) is cols
    assert cols.ids_with_round("queued") == {str(r.id) for r in rows if r.round is not None and r.state == "queued"}


@settings(max_examples=200, deadline=None)
@given(st.lists(row, max_size=30), st.booleans(), st.booleans())
def test_the_columns_make_each_rows_queued_chart(rows, with_round, work):
    made = list(ChartColumns.of(rows).queued_charts(with_round=with_round, work=work))
    assert made == [r.queued_chart(with_round=with_round, work=work) for r in rows]
    assert all(c.id == str(c.seq) for c in made)


def test_the_database_read_in_batches_gives_the_rows_of_each_tuple():
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    tuples = [(i, 1, "review", "queued", at + timedelta(seconds=i), False, None, False, None, False, f"x-{i}", None, None, None,
               None, None, False, None, None, None) for i in range(1, 8)]
    got = db.chart_columns([tuples[:3], tuples[3:], []])
    assert list(got) == [db._row(t) for t in tuples]


def _world(rows):
    orgs = [OrgRow(1, "Acme", "acme", 2), OrgRow(2, "Beta", "beta", 1, 3600.0)]
    return World(Config(budget=4, eta_model="lanes"), orgs, {}, {}, rows)


def test_a_state_loaded_from_columns_is_the_state_loaded_from_rows():
    rows = [ChartRow(i, 1 + i % 3, "review", "running" if i % 7 == 0 else "queued", 1000.0 + i,
                     priority=i % 11 == 0, paused=i % 13 == 0, external_id=f"ext-{i}" if i % 2 else None,
                     started_at=900.0 if i % 7 == 0 else None, due_at=5000.0 if i % 5 == 0 else None,
                     due_explicit=i % 5 == 0, due_alert="late" if i % 17 == 0 else "")
            for i in range(1, 200)]  # org 3 is unknown: its charts are left out, its running ones kept
    listed, columned = LiveState(_world(rows)), LiveState(_world(ChartColumns.of(rows)))
    for s in (listed, columned):
        assert [c.id for c in s.queue.iter_charts()] == [c.id for c in listed.queue.iter_charts()]
        assert s.external_ids == {r.id: r.external_id for r in rows if r.state == "queued" and r.org != 3}
        assert s.unpromised == {str(r.id) for r in rows if r.org != 3}
        assert s.queued_by_org == listed.queued_by_org == {1: 57, 2: 57}
        assert set(s.running) == {r.id for r in rows if r.state == "running"}
        assert s.due.explicit == {r.id: 5000.0 for r in rows if r.due_explicit and r.org != 3}
        assert s.due.alerts == {r.id: 2 for r in rows if r.due_alert and r.org != 3}


def test_the_load_keeps_one_copy_of_each_id():
    """The queue's id string is the unpromised set's, not a copy (at a million charts each
    copy is 28-55 MB); the external ids hold no id of their own (engine/store/external_ids.py)."""
    state = LiveState(_world(ChartColumns.of(
        ChartRow(i, 1, "review", "queued", 1000.0 + i, external_id=f"e{i}") for i in range(1000, 1100))))
    seqs = {c.seq: c for c in state.queue.iter_charts()}
    ids = {c.id: c for c in state.queue.iter_charts()}
    assert len(ids) == 100
    assert isinstance(state.external_ids, ExternalIds)
    assert dict(state.external_ids.items()) == {i: f"e{i}" for i in seqs}
    for cid in state.unpromised:
        assert any(cid is k for k in ids if k == cid)


def test_the_state_knows_its_queued_and_running_charts_as_known_ids_lists_them():
    rows = [ChartRow(i, 1 + i % 3, "review", "running" if i % 7 == 0 else "queued", 1000.0 + i,
                     external_id=f"ext-{i}" if i % 2 else None, started_at=900.0 if i % 7 == 0 else None)
            for i in range(1, 300)]  # org 3 is unknown: its queued charts are left out, its running ones kept
    state = LiveState(_world(ChartColumns.of(rows)))
    known = state.known_ids()
    assert 7 in known and 2 not in known and 14 in known  # 2: queued of org 3; 14: running of org 3
    assert [i for i in range(-5, 400) if state.knows(i)] == sorted(known)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=8))))
def test_a_column_of_strings_held_as_bytes_reads_back_as_a_list(values):
    col = StrColumn(values)
    assert list(col) == values and len(col) == len(values)
    assert [col[i] for i in range(len(values))] == values == [col[i - len(values)] for i in range(len(values))]
    assert col[1:-1] == values[1:-1]
    assert list(StrColumn(map(col.__getitem__, range(0, len(values), 2)))) == values[::2]  # as where() selects
    with pytest.raises(IndexError):
        col[len(values)]
