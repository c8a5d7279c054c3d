"""The published order's rows held as columns (fairsched.engine.order_rows) read exactly as
the rows they stand for: a list of dicts of ROW_KEYS, whole, sliced, by place, per org."""
from __future__ import annotations

import json
from array import array

from hypothesis import given, settings, strategies as st

from fairsched.engine import order_rows
from fairsched.engine.store.external_ids import ExternalIds
from fairsched.engine.order_rows import DUE_CODE, NAN, NO_ROUND, ROW_KEYS, LookedUp, Rows

maybe_s = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False))
due = st.one_of(st.none(), st.tuples(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from(["on_time", "at_risk", "late"]),
                                      maybe_s))
chart = st.tuples(st.integers(1, 2 ** 40), st.integers(1, 4), st.sampled_from(["review", "code", None]),
                  st.integers(1, 9), st.one_of(st.none(), st.integers(0, 2 ** 40)),
                  st.one_of(st.none(), st.text(max_size=5)), st.one_of(st.none(), st.tuples(maybe_s, maybe_s, maybe_s)), due)
aside = st.tuples(st.integers(1, 2 ** 40), st.integers(1, 4), st.sampled_from(["held", "paused", "blocked"]))


def filled(charts) -> tuple[Rows, list[tuple]]:
    """The columns as ``publish._ordered_rows`` fills them, and the tuples they stand for."""
    rows = Rows()
    c = rows.cols
    want = []
    for pos, (i, org, wf, cost, rnd, ext, eta, d) in enumerate(charts):
        start, fin, p90 = eta or (None, None, None)
        due_s, state, slack = d or (None, None, None)
        c.id.append(i), c.org.append(org), c.workflow.append(wf), c.cost.append(cost)
        c.round.append(NO_ROUND if rnd is None else rnd), c.ext.append(ext)
        for col, v in ((c.start, start), (c.finish, fin), (c.p90, p90), (c.due, due_s), (c.slack, slack)):
            col.append(NAN if v is None else v)
        c.due_state.append(DUE_CODE[state])
        want.append((i, pos, org, wf, cost, rnd, rnd is None, "ordered", ext, start, fin, p90, due_s, state, slack))
    return rows, want


def as_dicts(tuples) -> list[dict]:
    return [t if type(t) is dict else dict(zip(ROW_KEYS, t)) for t in tuples]


def compact(rows: list[dict]) -> str:
    return json.dumps(rows, separators=(",", ":"))


def test_a_page_writes_infinite_and_missing_times_as_json_does():
    rows, want = filled([(5, 1, "code", 2, 3, "é\"x", (float("inf"), -float("inf"), None), (-0.0, "late", 1e-7))])
    assert rows.json_page(0, 1) == compact(as_dicts(want)) == (
        '[{"id":5,"pos":0,"org":1,"workflow":"code","cost":2,"round":3,"priority":false,"state":"ordered",'
        '"external_id":"\\u00e9\\"x","start_s":Infinity,"finish_s":-Infinity,"p90_s":null,"due_s":-0.0,'
        '"due_state":"late","slack_s":1e-07}]')


def compact_place(d: dict) -> str:
    """A chart's place as the snapshot stores it (``c:<id>``): its due fields only with a due state."""
    keys = ("pos", "state", "finish_s", "start_s", "p90_s") + (("due_s", "due_state", "slack_s") if d.get("due_state") else ())
    return json.dumps([d.get(k) for k in keys], separators=(",", ":"))


@settings(max_examples=200, deadline=None)
@given(charts=st.lists(chart, max_size=40), asides=st.lists(aside, max_size=4), cut=st.tuples(st.integers(-5, 50),
       st.integers(-5, 50)), org=st.integers(1, 4), k=st.integers(-50, 50), looked_up=st.booleans())
def test_columns_read_as_the_rows_they_stand_for(charts, asides, cut, org, k, looked_up):
    page, order_rows.PAGE = order_rows.PAGE, 7  # a whole view is walked 7 rows at a time: pages crossed
    try:
        check(charts, asides, cut, org, k, looked_up)
    finally:
        order_rows.PAGE = page


def check(charts, asides, cut, org, k, looked_up=False):
    rows, want = filled(charts)
    if looked_up and len({c[0] for c in charts}) == len(charts):
        # as publish fills it: the external ids looked up by chart id when read (ExternalIds)
        ext = ExternalIds({c[0]: c[5] for c in charts})
        rows.cols.ext = LookedUp(rows.cols.id, ext.get)
    tail = [(i, None, o, "review", 1, None, False, state, None, None, None, None, None, None, None)
            for i, o, state in asides]
    rows.tail.extend(tail)
    whole = as_dicts(want + tail)
    assert len(rows) == len(whole) and list(rows) == whole and rows == whole
    assert rows[slice(*cut)] == whole[slice(*cut)]
    assert rows[::3] == whole[::3]
    if -len(whole) <= k < len(whole):
        assert rows[k] == whole[k]
    assert list(rows.json_places()) == [(d["id"], compact_place(d)) for d in whole]
    assert list(rows.external_ids()) == [d["external_id"] for d in whole]
    assert rows.json_page(*cut) == compact(whole[slice(*cut)])  # the text json writes, from the columns
    # one org's view: its rows' indexes (their places in the order), then its aside and running charts
    mine = array("q", [p for p, t in enumerate(want) if t[2] == org])
    running = {"id": 7, "org": org, "state": "running", "external_id": "r"}
    view = Rows(rows.cols, mine, [t for t in tail if t[2] == org] + [running])
    expect = as_dicts([want[p] for p in mine] + [t for t in tail if t[2] == org]) + [running]
    assert list(view) == expect and len(view) == len(expect)
    assert view[slice(*cut)] == expect[slice(*cut)]
    assert list(view.json_places()) == [(d["id"], compact_place(d)) for d in expect]
    assert view.json_page(*cut) == compact(expect[slice(*cut)])
    assert view.json_page(0, len(expect)) == compact(expect)
    assert list(view.external_ids()) == [d["external_id"] for d in expect]
